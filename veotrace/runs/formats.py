"""Run `formats`: every input kind veotrace reads, detected by content or read by one command."""

from __future__ import annotations

from dataclasses import dataclass

from veotrace.runs.result import RunResult

#: Inputs read by one command from the path given to it (not detected by content for the others):
#: (name, description, what reads them). `info` recognises per-frame tables too.
COMMAND_INPUTS = (
    ("frames", "per-frame metrics table: CSV, Parquet, JSON Lines or a generation service's JSON "
     "{\"frames\": [...]} (id_match_rate, flow_l2_px, clip_entropy_bits, coherence_score)", "coherence, info"),
    ("arrays", "numeric arrays: .npy, .npz (--addrs-name/--epe-name pick the array), or columns of a "
     "CSV or Parquet file; never unpickled", "correlate"),
)


@dataclass
class FormatsRun(RunResult):
    """``formats``' result: ``value`` is the list of detected formats (``sources.detect.Format``)."""

    command = "formats"

    def to_dict(self) -> dict:
        return {"detected": [{"name": f.name, "description": f.description, "provides": list(f.provides)}
                             for f in self.value],
                "command_inputs": [{"name": n, "description": d, "commands": c} for n, d, c in COMMAND_INPUTS]}

    def text(self) -> str:
        """The listing the command prints."""
        lines = ["Detected by content (any command that needs the table; --format-hint NAME forces one):"]
        lines += [f"  {f.name:<16} {f.description}  [{', '.join(f.provides)}]" for f in self.value]
        lines.append("Read by one command from the path given to it:")
        lines += [f"  {name:<16} {description}  [{commands}]" for name, description, commands in COMMAND_INPUTS]
        return "\n".join(lines) + "\n"

    def render(self, console, *, max_rows: int = 40) -> None:
        console.file.write(self.text())


def formats() -> FormatsRun:
    """Every input kind veotrace reads: formats detected by content (names for ``format_hint``) and per-command inputs."""
    from veotrace.sources.detect import FORMATS

    return FormatsRun(list(FORMATS))
