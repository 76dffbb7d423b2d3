"""Bursts: maximal runs of events closer than a gap, their one-pass partial, and the kernels behind kernel bursts."""
