"""Regenerate training_log.csv: a seeded training loop whose frees pair with their allocs by address.

Run from the repository root: python3 sample_traces/simulate/make_training_log.py
"""

from pathlib import Path

from veotrace.synth.training import write_training_log

if __name__ == "__main__":
    log = write_training_log(Path(__file__).with_name("training_log.csv"), seed=0, steps=20, layers=12)
    print(f"{log.table.num_rows} events, {log.allocs} allocs, peak live {log.peak_live_bytes:,} bytes")
