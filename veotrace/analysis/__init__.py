"""Analyses: pure functions, Arrow/numpy in, dataclasses/Arrow out. They never print, plot or read files."""
