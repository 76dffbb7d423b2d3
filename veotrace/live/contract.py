"""Live layer: the data contract of following, written down once: the JSON Lines records a follower prints
and the checkpoint file it keeps (each versioned), and the atomic write of that file.

JSON Lines (``-f jsonl``, one object per line, flushed as it is written):

- ``{"record": "window", "command": "entropy", "complete": true, <the window's row>}``: the row has the
  columns of the offline command's windows (``entropy --format json``'s ``windows``: window, start_ns,
  end_ns, hours, events, classes_present, entropy_bits, normalized_entropy, start_s), the same numbers.
  ``complete`` is false for the windows printed when following stops before the log proved them
  complete (the log's last windows, as one read of the log then would show them).
- ``{"record": "verdict", "command": "gate", ...}``: gate's verdict when it changes.
- ``{"record": "end", "reason": "idle" | "until" | "interrupted", "events_read", "events_counted",
  "windows", "late_rows", "skipped_rows"}``: the last line.

The checkpoint (``--state FILE``): one JSON object, ``format`` STATE_FORMAT, the veotrace version, the
command, the input followed (absolute path) and the options that shape the windows; ``tail``: the
generations read (``live.tail``; a snapshot piece is known by its name and size); ``windows``: the
analysis' open windows (fragmentation: the replay's allocator state, ``frag.windows.Replay.to_json``,
its live blocks' arrays in base64); ``digest``: ``sha256:`` and the hex SHA-256 of every other field as
canonical JSON (``digest_of``: keys sorted, no spaces, ASCII), written with the file and checked before any
field is used, so one changed character anywhere (a base64 digit of a packed array) is refused, naming the
checkpoint. The digest proves the file is the one the follower wrote, not who wrote it: a crafted file with
a recomputed digest still meets every field's schema and the checks of values that cannot happen (a block
whose requested bytes exceed its allocated bytes, a window peak below its level). A checkpoint of another
format, version, input, command or options is refused, naming both; one of format
``veotrace.follow_state/1`` (written before checkpoints carried a digest) is refused as one that cannot be
proven intact: remove it to start from the beginning.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from pathlib import Path

from veotrace.errors import VeotraceError
from veotrace.live.tail import Generation
from veotrace.sources.logs.lines import LogShape

#: Version of the JSON Lines records (every record carries it as "format").
RECORD_FORMAT = "veotrace.follow/1"
#: Version of the checkpoint file.
STATE_FORMAT = "veotrace.follow_state/2"
#: The format before the digest (issue 47): refused as unprovable, with what to do.
_UNDIGESTED = "veotrace.follow_state/1"


def record(kind: str, command: str, **fields) -> dict:
    """One JSON Lines record of kind ``window``, ``verdict`` or ``end``."""
    return {"format": RECORD_FORMAT, "record": kind, "command": command, **fields}


def generation_to_json(g: Generation) -> dict:
    shape = g.shape
    return {"fp": base64.b64encode(g.fp).decode(), "done": g.done, "lines": g.lines, "name": g.name,
            "jsonl": None if shape is None else shape.is_jsonl,
            "header": None if shape is None or shape.header is None else shape.header.decode("utf-8", "replace")}


def generation_from_json(d: dict, path: Path) -> Generation:
    shape = None
    if d.get("jsonl") is True:
        shape = LogShape(True)
    elif d.get("header") is not None:
        shape = LogShape.of(d["header"].encode(), d.get("name") or path)
    return Generation(base64.b64decode(d["fp"]), int(d["done"]), int(d["lines"]), shape, d.get("name", ""))


def identity(command: str, target: Path, params: dict) -> dict:
    """What a checkpoint must match to be resumed: format, version, command, input and window options."""
    from veotrace import __version__

    # as the file holds them (tuples are JSON lists): gate's options held a tuple, so its checkpoint never matched
    return {"format": STATE_FORMAT, "veotrace": __version__, "command": command,
            "input": str(Path(target).resolve()), "params": json.loads(json.dumps(params))}


def load_state(path: Path, expected: dict, windows_schema, extra_schema=None) -> dict | None:
    """The checkpoint at ``path`` (None when there is none yet), checked before any of it is used: read with the
    bounds of any input (``live.checkpoint.read``), its format, version and command against ``expected``
    (``identity``), every field against its schema (the tail's generations, ``windows_schema`` of the
    analysis' open windows, ``extra_schema`` of the gate's verdicts), then its input and options.

    Raises:
        VeotraceError: not a checkpoint, a damaged one (naming the field), or one of another format, version,
            command, input or options.
    """
    from veotrace.live import checkpoint as c

    state = c.read(path)
    if state is None:
        return None
    if state.get("format") == _UNDIGESTED:
        raise c.damaged(path, "was written by an earlier veotrace, before checkpoints carried a digest of their "
                              "content: it cannot be proven intact")
    _same(state, expected, ("format",), path)
    _intact(state, path)
    _same(state, expected, ("veotrace", "command"), path)  # then the fields are this version's and command's
    state = c.check(state, _schema(windows_schema, extra_schema), path)
    _consistent(state, path)
    _same(state, expected, ("input", "params"), path)
    return state


def digest_of(state: dict) -> str:
    """``sha256:`` and the hex SHA-256 of ``state`` (without its ``digest``) as canonical JSON: keys sorted, no
    spaces, ASCII escapes. A checkpoint read back parses to the values written (floats round-trip in JSON),
    so the digest recomputed over them is the one written."""
    body = {k: v for k, v in state.items() if k != "digest"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return "sha256:" + hashlib.sha256(text.encode("ascii")).hexdigest()


def _intact(state: dict, path: Path) -> None:
    """The checkpoint's ``digest`` against its content (then dropped: the schema is of the content)."""
    from veotrace.live import checkpoint as c

    written = state.pop("digest", None)
    if written is None:
        raise c.damaged(path, "holds no digest of its content (every checkpoint this version writes has one): it "
                              "cannot be proven intact")
    if not isinstance(written, str) or written != digest_of(state):
        raise c.damaged(path, "does not match the digest written with it (the file was edited or corrupted after "
                              "the follower wrote it)")


def _consistent(state: dict, path: Path) -> None:
    """The windows' counts against the lines the tail read: a checkpoint whose tail was emptied or cut would
    resume by reading the log again from the start, counting its rows twice."""
    from veotrace.live import checkpoint as c

    read = state["windows"].get("events_read", 0)
    tail = state["tail"]
    pieces = any(base64.b64decode(g["fp"]).startswith(b"piece:") for g in tail)
    if not pieces and read > sum(g["lines"] for g in tail):
        raise c.damaged(path, f"windows.events_read = {read:,} is more than the {sum(g['lines'] for g in tail):,} "
                              "lines its tail says were read")
    for i, g in enumerate(tail):
        wrong = _shape_wrong(g)
        if wrong:
            raise c.damaged(path, f"tail[{i}] {wrong}")


def _shape_wrong(g: dict) -> str | None:
    """What is wrong with a generation's log shape (JSON Lines, or CSV and its header) against its own first
    bytes (``fp``: the file's first line is there): a follower resumed with another shape would read the log's
    lines as another format's and blame the log."""
    fp = base64.b64decode(g["fp"])
    if fp.startswith(b"piece:"):
        return None
    lines = fp.split(b"\n")
    first = next((ln for ln in lines[:-1] if ln.strip()), None)  # a whole line: the file's first that is not blank
    if g["done"] and g["jsonl"] is None:
        return "has read lines of a log whose shape (CSV or JSON Lines) it does not hold"
    if first is None or g["jsonl"] is None:
        return None
    text = first.removeprefix(b"\xef\xbb\xbf").strip()
    if g["jsonl"] != text.startswith(b"{"):
        return f"says the log is {'JSON Lines' if g['jsonl'] else 'CSV'}, and its first line is not"
    if not g["jsonl"] and g["header"] != text.decode("utf-8", "replace"):
        return "holds a CSV header that is not the log's first line"
    return None


def _same(state: dict, expected: dict, keys: tuple[str, ...], path: Path) -> None:
    for key in keys:
        if state.get(key) != expected[key]:
            raise VeotraceError(
                f"the checkpoint is of {key} {json.dumps(state.get(key))[:200]}, this run's is {json.dumps(expected[key])}",
                path=path,
                hint="Give another --state file, or remove this one to start from the beginning")


def _schema(windows_schema, extra_schema):
    """The whole checkpoint's schema (see the module docstring for its fields)."""
    from veotrace.live import checkpoint as c
    from veotrace.live.tail import FP_BYTES
    from veotrace.sources.limits import max_line_bytes

    generation = c.record({"fp": c.packed(1, max_bytes=FP_BYTES + 1024), "done": c.COUNT, "lines": c.COUNT,
                           "name": c.text(), "jsonl": c.optional(c.flag),
                           "header": c.optional(c.text(max_line_bytes()))})
    fields = {"format": c.text(64), "veotrace": c.text(64), "command": c.text(64), "input": c.text(),
              "params": lambda v, where: v, "tail": c.items(generation, max_len=1 << 20), "windows": windows_schema}
    if extra_schema is not None:
        fields["extra"] = extra_schema
    return c.record(fields, optional_keys=("extra",))


def save_state(path: Path, state: dict) -> None:
    """Write the checkpoint atomically: a temporary file in the same folder, flushed, then renamed over it."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    state = {**state, "digest": digest_of(state)}  # tuples dump as the lists they are read back as
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(state, fh, separators=(",", ":"))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
