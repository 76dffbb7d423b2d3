"""Renderers: analysis results -> terminal (rich), JSON, CSV, Parquet. No analysis happens here."""
