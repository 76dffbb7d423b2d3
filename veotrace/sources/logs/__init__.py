"""Readers of alloc/free event logs (CSV and JSON Lines, plain or compressed): the exact and the fast path, extra columns, number parsing."""
