"""Readers of PyTorch CUDA memory snapshots (pickles) and the restricted unpickler they go through."""
