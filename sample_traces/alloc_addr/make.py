"""Regenerate alloc_addr.csv: a 3-hour alloc/free log with hex addresses whose frees all match.

    python3 sample_traces/alloc_addr/make.py

64 address slots 512 KiB apart, each alternating alloc and free (veotrace.synth.heap.slot_log, seed 7).
"""

from pathlib import Path

from veotrace.synth.heap import write_slot_log

if __name__ == "__main__":
    write_slot_log(Path(__file__).with_name("alloc_addr.csv"), events=3000, seed=7, slots=64, slot_bytes=512 << 10, hours=3.0)
