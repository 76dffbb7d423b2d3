"""Readers of NVIDIA Nsight exports: Nsight Systems (stats CSV, SQLite) and Nsight Compute (CSV pages, .ncu-rep)."""
