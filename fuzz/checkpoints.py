"""Follow checkpoints (``--state`` files) as fuzz input: valid seeds, JSON-aware mutations, and the resume they feed.

- ``seed_states(folder)``: a checkpoint of each follower (entropy, bursts, fragmentation, gate) taken half way
  through ``FOLLOW_LOG`` (written to ``folder/follow.csv``, whose absolute path the checkpoints name).
- ``mutate_state(data, rng)``: one field replaced by what a damaged or crafted file holds (a negative count, a
  huge or fractional number, NaN, a string, a list, deep nesting, bad base64, a key dropped, added or given
  twice, one character of a packed array changed, a block's requested bytes raised past its size), or the
  bytes mutated as any file's are (``fuzz.mutate``). A structured change is re-signed (its ``digest``
  recomputed, as a crafted file would be) four times in five, so the schema behind the digest is exercised;
  otherwise the digest must refuse it.
- ``resume(command, state)``: the follower resumed from ``state`` and run to the end of the log on simulated
  time: it returns, or raises ``VeotraceError``; anything else is a bug.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

#: 3,000 allocations and frees over 60 s on two devices (addresses reused, so the replay holds live blocks);
#: its first half is past entropy's origin rows (entropy_series.ORIGIN_ROWS), so every follower checkpoints.
FOLLOW_LOG = b"timestamp,op_type,size_bytes,address,device\n" + b"".join(
    b"%d,%s,%d,%d,%d\n" % (i * 20_000_000, b"alloc" if i % 3 else b"free", 4096 << (i * 7 % 9),
                           0x7F0000000000 + (i // 3) * (1 << 22), i % 2) for i in range(3000))
COMMANDS = ("entropy", "bursts", "fragmentation", "gate")


class _Clock:
    """Simulated time: every sleep advances it (the follow loop's ``clock``)."""

    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def _log(folder: Path) -> Path:
    log = folder / "follow.csv"
    if not log.exists() or log.read_bytes() != FOLLOW_LOG:
        log.write_bytes(FOLLOW_LOG)
    return log


def _baseline(folder: Path) -> Path:
    path = folder / "follow-baseline.json"
    if not path.exists():
        from veotrace.runs.entropy import entropy

        entropy([_log(folder)], window="1s", save_baseline=path)
    return path


def resume(command: str, state: Path, *, log: Path | None = None) -> str | None:
    """Resume ``command``'s follower from the checkpoint ``state`` over the log beside it, to the log's end."""
    from veotrace.live.follow import Clock
    from veotrace.runs import follow as f
    from veotrace.runs.follow_gate import follow_gate

    log = log or _log(state.parent)
    clock = _Clock()
    kw = dict(emit=lambda r: None, note=lambda m: None, poll=1, idle_timeout=2, state=state,
              clock=Clock(clock.now, clock.sleep))
    if command == "entropy":
        return f.follow_entropy(log, window="1s", **kw)
    if command == "bursts":
        return f.follow_bursts(log, **kw)
    if command == "fragmentation":
        return f.follow_fragmentation(log, window="2s", **kw)
    return follow_gate(log, baseline=_baseline(state.parent), resamples=99, **kw)


def seed_states(folder: Path) -> dict[str, bytes]:
    """A valid checkpoint of each follower, taken with the first half of the log read (open windows in it)."""
    log = folder / "follow.csv"
    out = {}
    for command in COMMANDS:
        state = folder / f"seed-{command}.state"
        state.unlink(missing_ok=True)
        log.write_bytes(FOLLOW_LOG[: FOLLOW_LOG.index(b"\n", len(FOLLOW_LOG) // 2) + 1])
        try:
            resume(command, state, log=log)
        finally:
            log.write_bytes(FOLLOW_LOG)
        out[f"{command}.state"] = state.read_bytes()
        state.unlink()
    return out


_HOSTILE = (-1, -(2**63), 2**63, 2**64, 10**30, 0.5, 1e308, -0.0, "x", "", None, True, [], {}, [[[]]], "AAA",
            "!!!!", "A" * 10_001, [-1, -1], {"0": -1})


def _paths(doc, prefix=()):
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc[:50]):
            yield from _paths(v, (*prefix, i))


def mutate_state(data: bytes, rng: random.Random) -> bytes:
    """One hostile change to a checkpoint (see the module docstring)."""
    from fuzz.mutate import mutate

    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):  # not JSON (any more), or nested past json's own recursion
        return mutate(data, rng)
    k = rng.random()
    if k < 0.15 or not isinstance(doc, dict):
        return mutate(data, rng)
    paths = [p for p in _paths(doc) if p]
    if not paths:  # an empty object: nothing to change inside
        return mutate(data, rng)
    if k < 0.25:
        edited = _edit_packed(doc, rng)
        if edited is not None:
            return _sign(doc, rng)
    path = rng.choice(paths)
    parent = doc
    for step in path[:-1]:
        parent = parent[step]
    key = path[-1]
    if k < 0.7:
        parent[key] = rng.choice(_HOSTILE)
    elif k < 0.8 and isinstance(parent, dict):
        del parent[key]
    elif k < 0.85 and isinstance(parent, dict):
        parent["surprise"] = 1
    elif k < 0.9:
        if rng.random() < 0.3:  # nested past what any checkpoint holds (and past json's recursion, as text)
            parent[key] = "@deep@"
            n = rng.choice([150, 5000])
            return json.dumps(doc).replace('"@deep@"', "[" * n + "]" * n, 1).encode()
        parent[key] = [parent[key]] * 3
    elif k < 0.93 and isinstance(parent, dict) and "digest" in doc:
        doc.pop("digest")  # as a checkpoint of before issue 47
        return json.dumps(doc).encode()
    else:
        text = json.dumps(doc)
        return rng.choice([text.replace("1", "NaN", 1), text.replace("0", "Infinity", 1),
                           text[:-1] + ', "tail": []}', text.encode().replace(b"e", b"\xff", 1).decode("latin-1")]).encode(
            "latin-1", "replace")
    return _sign(doc, rng)


def _sign(doc: dict, rng: random.Random) -> bytes:
    from veotrace.live.contract import digest_of

    if rng.random() < 0.8:
        try:
            doc["digest"] = digest_of(doc)
        except ValueError:  # NaN in it: json refuses to sign it (and the reader refuses the NaN first)
            pass
    return json.dumps(doc).encode()


def _edit_packed(doc: dict, rng: random.Random) -> bool | None:
    """One base64 character of a packed array changed, or a block's requested bytes raised past its size
    (fragmentation's checkpoints; None for the others)."""
    import base64

    states = doc
    for key in ("windows", "replay", "states"):  # whatever an earlier mutation left there
        states = states.get(key) if isinstance(states, dict) else None
    if not isinstance(states, dict) or not states:
        return None
    st = rng.choice(list(states.values()))
    key = rng.choice(["addr", "size", "req"])
    if not isinstance(st, dict) or not isinstance(st.get(key), str) or not st[key]:
        return None
    if rng.random() < 0.5:
        i = rng.randrange(len(st[key]))
        st[key] = st[key][:i] + rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/") + st[key][i + 1:]
        return True
    try:
        raw = bytearray(base64.b64decode(st[key] + "=" * (-len(st[key]) % 4)))
    except ValueError:  # binascii.Error: a packed array an earlier mutation broke
        return None
    if len(raw) < 8:
        return None
    j = rng.randrange(len(raw) // 8) * 8
    raw[j:j + 8] = (int.from_bytes(raw[j:j + 8], "little", signed=True) + rng.choice([1, 1 << 32, 3_758_096_384])
                    ).to_bytes(8, "little", signed=True) if int.from_bytes(raw[j:j + 8], "little", signed=True) < 2**62 else raw[j:j + 8]
    st[key] = base64.b64encode(bytes(raw)).decode()
    return True
