"""`veotrace formats`: every input kind veotrace reads, and which commands read it."""

from __future__ import annotations

from veotrace.cli.app import app

#: Inputs read by one command from the path given to it (not detected by content for the others):
#: (name, description, what reads them). `info` recognises per-frame tables too.
COMMAND_INPUTS = (
    ("frames", "per-frame metrics table: CSV, Parquet, JSON Lines or a generation service's JSON "
     "{\"frames\": [...]} (id_match_rate, flow_l2_px, clip_entropy_bits, coherence_score)", "coherence, info"),
    ("arrays", "numeric arrays: .npy, .npz (--addrs-name/--epe-name pick the array), or columns of a "
     "CSV or Parquet file; never unpickled", "correlate"),
)


@app.command("formats")
def formats_command() -> None:
    """List every input kind veotrace reads: formats detected by content (names for --format-hint) and per-command inputs."""
    from veotrace.sources.detect import FORMATS

    print("Detected by content (any command that needs the table; --format-hint NAME forces one):")
    for fmt in FORMATS:
        print(f"  {fmt.name:<16} {fmt.description}  [{', '.join(fmt.provides)}]")
    print("Read by one command from the path given to it:")
    for name, description, commands in COMMAND_INPUTS:
        print(f"  {name:<16} {description}  [{commands}]")
