"""The settings ``tune`` searches: knobs of PYTORCH_CUDA_ALLOC_CONF, a default grid, and the combinations
known to misbehave.

A candidate is one value per knob (``None``: not set, PyTorch's default), written as the
``PYTORCH_CUDA_ALLOC_CONF`` text PyTorch reads (knobs in :data:`KNOBS` order, unset ones left out; the
empty text is PyTorch's defaults) and parsed by ``allocators.conf.parse_conf``, so a value PyTorch
would refuse is refused here too. ``--try KEY=V1,V2`` replaces one knob's values in the grid;
``--space FILE`` (TOML, a ``[space]`` table of lists) replaces the grid.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from pathlib import Path

from veotrace.allocators.conf import DEFAULT_RELEASE, TorchConf, parse_conf, release
from veotrace.errors import UsageError

#: The knobs searched, in the order a setting is written; each with the values it accepts.
KNOBS: dict[str, str] = {
    "expandable_segments": "True or False",
    "max_split_size_mb": "an integer >= 20 (MiB)",
    "roundup_power2_divisions": "a power of 2, or a list [MB:DIV,...,>:DIV]",
    "max_non_split_rounding_mb": "an integer >= 20 (MiB)",
    "garbage_collection_threshold": "a number in (0, 1), under a memory fraction (--fraction)",
}
#: The first torch release that accepts each knob (a knob the release refuses is left out of its grid).
SINCE = {"expandable_segments": "2.1", "max_non_split_rounding_mb": "2.6"}
#: The word for a knob left at PyTorch's default.
UNSET = "unset"
#: The default grid (2 x 3 x 3 x 2 = 36 settings; x 2 under a memory fraction, for the GC threshold).
DEFAULT_GRID: dict[str, list] = {
    "expandable_segments": [None, "True"],
    "max_split_size_mb": [None, "128", "512"],
    "roundup_power2_divisions": [None, "4", "[256:1,512:2,1024:4,>:8]"],
    "max_non_split_rounding_mb": [None, "256"],
}
GC_GRID = [None, "0.8"]


@dataclass(frozen=True)
class Misbehaves:
    """A combination evaluated but never recommended, with why and where that is known from."""

    reason: str
    source: str


#: Combinations known to misbehave: (test on a candidate's values, what is known).
KNOWN_BAD: tuple[tuple, ...] = (
    (lambda v: v.get("expandable_segments") == "True" and v.get("max_split_size_mb") is not None,
     Misbehaves("max_split_size_mb with expandable_segments: the split limit fights segment growth "
                "(large blocks are not split, so expanded segments are not reused)",
                "pytorch/pytorch#123548")),
)


@dataclass(frozen=True)
class Candidate:
    """One setting: its values per knob (None: unset), its PYTORCH_CUDA_ALLOC_CONF text and TorchConf."""

    index: int
    values: dict
    text: str
    conf: TorchConf = field(compare=False)
    misbehaves: Misbehaves | None = None

    def to_dict(self) -> dict:
        return {"id": self.index, "conf": self.text, "settings": {k: v for k, v in self.values.items() if v is not None},
                **({"misbehaves": {"reason": self.misbehaves.reason, "source": self.misbehaves.source}}
                   if self.misbehaves else {})}


def conf_text(values: dict) -> str:
    """The PYTORCH_CUDA_ALLOC_CONF text of ``values`` (knobs in KNOBS order; unset ones left out)."""
    return ",".join(f"{k}:{values[k]}" for k in KNOBS if values.get(k) is not None)


def _value(key: str, raw: object) -> str | None:
    """One value of ``key`` as PYTORCH_CUDA_ALLOC_CONF text (``unset``/None: not set)."""
    if raw is None or (isinstance(raw, str) and raw.strip().lower() == UNSET):
        return None
    if isinstance(raw, bool):
        return "True" if raw else "False"
    text = str(raw).strip()
    if key == "expandable_segments" and text.lower() in ("true", "false"):
        return text.capitalize()
    return text


def _split_values(text: str) -> list[str]:
    """``V1,V2`` split on commas outside brackets (a divisions list ``[256:1,>:8]`` is one value)."""
    out, depth, buf = [], 0, []
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(buf))
            buf = []
        else:
            buf.append(ch)
    out.append("".join(buf))
    return [v.strip() for v in out if v.strip()]


def _check_key(key: str, where: str) -> None:
    if key not in KNOBS:
        raise UsageError(f"{where}: unknown knob {key!r}",
                         hint="Knobs are " + "; ".join(f"{k} ({v})" for k, v in KNOBS.items()))


def grid(*, tries: list[str] = (), space: str | Path | None = None, fraction: bool = False,
         torch_release: str = DEFAULT_RELEASE) -> dict[str, list]:
    """The values of each knob: the default grid (the knobs ``torch_release`` accepts; the GC threshold only
    under a memory fraction, without which PyTorch never collects), or ``space``'s, with each ``--try
    KEY=V1,V2`` replacing that knob's values.

    Raises:
        UsageError: an unknown knob, a value ``torch_release`` would refuse (one line naming it and the
            accepted values), a GC threshold without a fraction, a space file that is not TOML.
    """
    rel = release(torch_release)
    values: dict[str, list] = {k: list(v) for k, v in DEFAULT_GRID.items() if release(SINCE.get(k, "2.0")) <= rel}
    if fraction:
        values["garbage_collection_threshold"] = list(GC_GRID)
    if space is not None:
        values = _read_space(Path(space))
    for t in tries:
        key, sep, rest = t.partition("=")
        key = key.strip()
        if not sep or not rest.strip():
            raise UsageError(f"--try {t!r}: expected KEY=V1,V2 (e.g. max_split_size_mb=unset,128,512)")
        _check_key(key, f"--try {t!r}")
        values[key] = [_value(key, v) for v in _split_values(rest)]
    for key, vals in values.items():
        for v in vals:
            if v is not None:
                try:
                    parse_conf(f"{key}:{v}", torch_release=torch_release)
                except UsageError as exc:
                    raise UsageError(f"{key}={v}: {exc.message.split(': ', 1)[-1]}",
                                     hint=f"{key} accepts {KNOBS[key]}, or '{UNSET}'") from None
    if not fraction and any(v is not None for v in values.get("garbage_collection_threshold", ())):
        raise UsageError("garbage_collection_threshold acts only under a memory fraction (PyTorch's malloc collects "
                         "only when set_per_process_memory_fraction was called)",
                         hint="Give --fraction F (the job's set_per_process_memory_fraction) and --capacity (the "
                              "device's memory)")
    return {k: list(dict.fromkeys(v)) or [None] for k, v in values.items()}


def _read_space(path: Path) -> dict[str, list]:
    import tomllib

    try:
        doc = tomllib.loads(path.read_text())
    except OSError as exc:
        raise UsageError(f"--space {path}: cannot read it ({exc.strerror})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"--space {path}: not TOML ({exc})",
                         hint='Write a [space] table of lists, e.g. max_split_size_mb = ["unset", 128, 512]') from None
    table = doc.get("space", doc)
    if not isinstance(table, dict) or not table:
        raise UsageError(f"--space {path}: no [space] table of knobs",
                         hint='e.g. [space]\nexpandable_segments = [false, true]')
    out = {}
    for key, vals in table.items():
        _check_key(key, f"--space {path}")
        vals = vals if isinstance(vals, list) else [vals]
        out[key] = [_value(key, v) for v in vals]
    return out


def candidates(values: dict[str, list], *, torch_release: str = DEFAULT_RELEASE,
               fraction: float | None = None) -> list[Candidate]:
    """Every combination of ``values``, each once per distinct TorchConf (the first text kept), read as
    ``torch_release`` reads it, under the job's memory ``fraction`` (a fact of the run, not a knob)."""
    keys = [k for k in KNOBS if k in values]
    out, seen = [], set()
    for combo in itertools.product(*(values[k] for k in keys)):
        v = dict(zip(keys, combo))
        text = conf_text(v)
        conf = (parse_conf(text, torch_release=torch_release) if text else
                TorchConf(source="PyTorch defaults", torch_release=torch_release))
        conf = replace(conf, per_process_memory_fraction=fraction)
        key = conf.key()
        if key in seen:
            continue
        seen.add(key)
        bad = next((m for test, m in KNOWN_BAD if test(v)), None)
        out.append(Candidate(len(out), v, text, conf, bad))
    return out


def text_of(conf: TorchConf) -> str:
    """PYTORCH_CUDA_ALLOC_CONF text that gives ``conf`` (a snapshot's settings, for the export line)."""
    from veotrace.allocators.conf import K_LARGE_BUFFER, MB, NO_LIMIT

    parts = []
    if conf.expandable_segments:
        parts.append("expandable_segments:True")
    if conf.max_split_size != NO_LIMIT:
        parts.append(f"max_split_size_mb:{conf.max_split_size // MB}")
    divs = conf.roundup_power2_divisions
    if any(divs):
        parts.append(f"roundup_power2_divisions:{divs[0]}" if len(set(divs)) == 1 else
                     "roundup_power2_divisions:[" + ",".join(f"{1 << i}:{d}" for i, d in enumerate(divs)) + "]")
    if conf.max_non_split_rounding_size != K_LARGE_BUFFER:
        parts.append(f"max_non_split_rounding_mb:{conf.max_non_split_rounding_size // MB}")
    if conf.garbage_collection_threshold:
        parts.append(f"garbage_collection_threshold:{conf.garbage_collection_threshold}")
    return ",".join(parts)


def candidate_of(index: int, conf: TorchConf) -> Candidate:
    """A candidate for settings read elsewhere (a snapshot's ``allocator_settings``): its text and values."""
    text = text_of(conf)
    values = {k: None for k in KNOBS}
    for part in _split_values(text):
        key, _, value = part.partition(":")
        values[key] = value
    bad = next((m for test, m in KNOWN_BAD if test(values)), None)
    return Candidate(index, values, text, conf, bad)


def export_lines(conf: TorchConf, text: str, *, rocm: bool = False) -> dict:
    """How to set a candidate: its ``export`` line, of the variable ``conf.torch_release`` reads without a
    warning (``allocators.conf.alloc_conf_variable``: ``PYTORCH_ALLOC_CONF`` from 2.9, ``PYTORCH_CUDA_ALLOC_CONF``
    before; ``rocm``: a ROCm build's), and, for a GC threshold, the memory fraction it needs (without one
    PyTorch never collects): in the string from torch 2.10 (``per_process_memory_fraction``), else the one
    Python line. Returns {"export", "python" or None, "variable", "variable_note"}."""
    from veotrace.allocators.conf import alloc_conf_variable

    f = conf.per_process_memory_fraction
    python = None
    if conf.garbage_collection_threshold > 0 and f is not None:
        if release(conf.torch_release) >= (2, 10):
            text = ",".join(x for x in (text, f"per_process_memory_fraction:{f:g}") if x)
        else:
            python = (f"torch.cuda.set_per_process_memory_fraction({f:g})  # on each device, before its first "
                      "allocation: garbage_collection_threshold acts only under it")
    var, var_note = alloc_conf_variable(conf.torch_release, rocm=rocm)
    return {"export": f"export {var}={text}" if text else f"unset {var}", "python": python, "variable": var,
            "variable_note": var_note}
