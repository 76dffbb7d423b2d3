"""Allocator settings: ``PYTORCH_CUDA_ALLOC_CONF`` strings and snapshot ``allocator_settings`` -> TorchConf.

The option names, bounds and the ``roundup_power2_divisions`` table follow PyTorch's parser
(``c10/core/AllocatorConfig.cpp``: ``lexArgs``, ``parseMaxSplitSize``, ``parseRoundUpPower2Divisions``,
``roundup_power2_divisions(size)``). Options that do not change where memory goes (pinned-memory and
lock options, ``backend:native``) are accepted and ignored; an unknown option is an error, as in PyTorch.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from veotrace.errors import UsageError

MB = 1 << 20
#: kLargeBuffer: the smallest max_split_size_mb PyTorch accepts is kLargeBuffer / 1 MiB = 20.
K_LARGE_BUFFER = 20 * MB
#: Power-of-two intervals for roundup_power2_divisions: 1 MiB ... 32 GiB (16 entries).
ROUNDUP_INTERVALS = 16
#: Accepted, parsed and ignored: they do not change which memory is reserved.
IGNORED_OPTIONS = frozenset({
    "release_lock_on_cudamalloc", "release_lock_on_hipmalloc", "pinned_use_cuda_host_register",
    "pinned_use_hip_host_register", "pinned_num_register_threads", "pinned_use_background_threads",
    "pinned_reserve_segment_size_mb", "graph_capture_record_stream_reuse", "per_process_memory_fraction",
})
KNOWN_OPTIONS = ("max_split_size_mb", "max_non_split_rounding_mb", "garbage_collection_threshold",
                 "roundup_power2_divisions", "expandable_segments", "backend") + tuple(sorted(IGNORED_OPTIONS))
#: max_split_size default: SIZE_MAX (no limit).
NO_LIMIT = (1 << 64) - 1


@dataclass(frozen=True)
class TorchConf:
    """The settings of PyTorch's caching allocator that decide reserved memory."""

    max_split_size: int = NO_LIMIT
    max_non_split_rounding_size: int = K_LARGE_BUFFER
    garbage_collection_threshold: float = 0.0
    roundup_power2_divisions: tuple[int, ...] = field(default_factory=lambda: (0,) * ROUNDUP_INTERVALS)
    expandable_segments: bool = False
    source: str = "defaults"

    def divisions_for(self, size: int) -> int:
        """``AllocatorConfig::roundup_power2_divisions(size)``: the entry of size's power-of-two interval."""
        index = size.bit_length() - 1 - 20
        return self.roundup_power2_divisions[min(max(index, 0), ROUNDUP_INTERVALS - 1)]

    def key(self) -> tuple:
        """The settings without their source: equal for two TorchConfs that allocate alike."""
        return (self.max_split_size, self.max_non_split_rounding_size, self.garbage_collection_threshold,
                tuple(self.roundup_power2_divisions), self.expandable_segments)

    def same(self, other: TorchConf | None) -> bool:
        """The same settings as ``other`` (whatever their source)."""
        return other is not None and self.key() == other.key()

    def to_dict(self) -> dict:
        return {
            "max_split_size": None if self.max_split_size == NO_LIMIT else self.max_split_size,
            "max_non_split_rounding_size": self.max_non_split_rounding_size,
            "garbage_collection_threshold": self.garbage_collection_threshold,
            "roundup_power2_divisions": list(self.roundup_power2_divisions),
            "expandable_segments": self.expandable_segments,
            "source": self.source,
        }


def _lex(text: str) -> list[str]:
    """``lexArgs``: split on , : [ ] keeping them as tokens; spaces are dropped."""
    tokens, buf = [], []
    for ch in text:
        if ch in ",:[]":
            if buf:
                tokens.append("".join(buf))
                buf = []
            tokens.append(ch)
        elif ch != " ":
            buf.append(ch)
    if buf:
        tokens.append("".join(buf))
    return tokens


def _bad(text: str, why: str) -> UsageError:
    return UsageError(f"--conf {text!r}: {why}",
                      hint=f"Options are {', '.join(KNOWN_OPTIONS[:6])} (as PYTORCH_CUDA_ALLOC_CONF)")


def _int(text: str, tok: str, what: str) -> int:
    try:
        return int(tok)
    except ValueError:
        raise _bad(text, f"{what} expects an integer, got {tok!r}") from None


def _pow2(v: int) -> bool:
    return v > 0 and v & (v - 1) == 0


def _divisions(text: str, toks: list[str], i: int) -> tuple[tuple[int, ...], int]:
    """``parseRoundUpPower2Divisions``: ``4`` (all intervals) or ``[256:1,512:2,>:8]`` (MiB: divisions)."""
    table = [0] * ROUNDUP_INTERVALS
    if i < len(toks) and toks[i] != "[":
        v = _int(text, toks[i], "roundup_power2_divisions")
        if not _pow2(v):
            raise _bad(text, "roundup_power2_divisions must be a power of 2")
        return (v,) * ROUNDUP_INTERVALS, i
    first, last = True, 0
    i += 1
    while i < len(toks) and toks[i] != "]":
        key = toks[i]
        if i + 2 >= len(toks) or toks[i + 1] != ":":
            raise _bad(text, "roundup_power2_divisions entries are INTERVAL_MB:DIVISIONS")
        v = _int(text, toks[i + 2], "roundup_power2_divisions")
        if v and not _pow2(v):
            raise _bad(text, "roundup_power2_divisions: divisions must be a power of 2 or 0")
        if key == ">":
            table[last:] = [v] * (ROUNDUP_INTERVALS - last)
        else:
            mb = _int(text, key, "roundup_power2_divisions interval")
            if not _pow2(mb):
                raise _bad(text, "roundup_power2_divisions: intervals must be powers of 2 (MiB)")
            idx = min(mb.bit_length() - 1, ROUNDUP_INTERVALS - 1)
            if first:
                table[:idx] = [v] * idx
                first = False
            table[idx] = v
            last = idx
        i += 3
        if i < len(toks) and toks[i] == ",":
            i += 1
    if i >= len(toks):
        raise _bad(text, "roundup_power2_divisions list is missing its ']'")
    return tuple(table), i


def parse_conf(text: str, *, base: TorchConf | None = None) -> TorchConf:
    """Parse a ``PYTORCH_CUDA_ALLOC_CONF`` string (e.g. ``"expandable_segments:True,max_split_size_mb:128"``).

    Raises:
        UsageError: an unknown option or a value PyTorch would refuse (one line naming it).
    """
    conf = base or TorchConf()
    toks = _lex(text)
    i, values = 0, {}
    while i < len(toks):
        key = toks[i]
        if key not in KNOWN_OPTIONS:
            raise _bad(text, f"unknown option {key!r} (PyTorch: 'Unrecognized CachingAllocator option')")
        if i + 2 > len(toks) or toks[i + 1] != ":" or i + 2 >= len(toks):
            raise _bad(text, f"option {key!r} needs a value, as {key}:VALUE")
        i += 2
        tok = toks[i]
        if key in ("max_split_size_mb", "max_non_split_rounding_mb"):
            v = _int(text, tok, key)
            if v < K_LARGE_BUFFER // MB:
                raise _bad(text, f"{key} too small, must be >= {K_LARGE_BUFFER // MB}")
            values["max_split_size" if key == "max_split_size_mb" else "max_non_split_rounding_size"] = v * MB
        elif key == "garbage_collection_threshold":
            try:
                v = float(tok)
            except ValueError:
                raise _bad(text, f"garbage_collection_threshold expects a number, got {tok!r}") from None
            if not 0.0 < v < 1.0:
                raise _bad(text, "garbage_collection_threshold must be in (0.0, 1.0)")
            values["garbage_collection_threshold"] = v
        elif key == "roundup_power2_divisions":
            values["roundup_power2_divisions"], i = _divisions(text, toks, i)
        elif key == "expandable_segments":
            if tok not in ("True", "False"):
                raise _bad(text, "expandable_segments expects True or False")
            values["expandable_segments"] = tok == "True"
        elif key == "backend" and tok != "native":
            raise _bad(text, f"backend:{tok} is not modelled (only the native caching allocator is)")
        i += 1
        if i < len(toks):
            if toks[i] != ",":
                raise _bad(text, f"expected ',' after {key}, got {toks[i]!r}")
            i += 1
    return replace(conf, source=f"--conf {text!r}", **values)


def from_settings(settings: object, *, path: object = None) -> TorchConf:
    """TorchConf from a snapshot's ``allocator_settings`` dict (FORMATS.md C.5).

    The settings are the file's input like any other field: a value PyTorch never writes there (a
    string for a number, a division that is not a power of two) is refused, naming ``path`` and the key.

    Raises:
        TraceFormatError: settings that are not a dict, or a value of the wrong type or range.
    """
    if not isinstance(settings, dict):
        raise _bad_setting(path, "", settings, "must be a dict of the allocator's settings")
    mss = settings.get("max_split_size", -1)
    if not _whole(mss) or mss < -1:
        raise _bad_setting(path, "['max_split_size']", mss, "must be a byte count, or -1 for no limit")
    gc = settings.get("garbage_collection_threshold") or 0.0
    if isinstance(gc, bool) or not isinstance(gc, (int, float)) or not 0.0 <= gc < 1.0:
        raise _bad_setting(path, "['garbage_collection_threshold']", gc, "must be a number in [0.0, 1.0)")
    expandable = settings.get("expandable_segments", False)
    if not isinstance(expandable, bool) and expandable not in (0, 1):
        raise _bad_setting(path, "['expandable_segments']", expandable, "must be True or False")
    return TorchConf(
        max_split_size=NO_LIMIT if mss < 0 or mss >= NO_LIMIT else mss,
        garbage_collection_threshold=float(gc),
        roundup_power2_divisions=_settings_divisions(settings.get("roundup_power2_divisions") or {}, path),
        expandable_segments=bool(expandable),
        source="snapshot allocator_settings",
    )


def _whole(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _settings_divisions(table: object, path: object) -> tuple[int, ...]:
    """The divisions table of ``allocator_settings``: ``{'1': 0, '2': 0, ..., '32768': 0}`` (interval in MiB,
    a power of two -> divisions, a power of two or 0), or a list of divisions per interval."""
    key = "['roundup_power2_divisions']"
    divisions = [0] * ROUNDUP_INTERVALS
    if isinstance(table, dict):
        for k, v in table.items():
            mb = int(k) if isinstance(k, str) and k.isascii() and k.isdigit() and len(k) < 20 else k
            if not _whole(mb) or not _pow2(mb):
                raise _bad_setting(path, f"{key} key", k, "must be an interval in MiB that is a power of two ('1', '2', ... '32768')")
            if not _whole(v) or v < 0 or (v and not _pow2(v)):
                raise _bad_setting(path, f"{key}[{k!r}]", v, "must be a power of 2 or 0")
            idx = mb.bit_length() - 1
            if idx < ROUNDUP_INTERVALS:
                divisions[idx] = v
    elif isinstance(table, (list, tuple)):
        for i, v in enumerate(table[:ROUNDUP_INTERVALS]):
            if not _whole(v) or v < 0 or (v and not _pow2(v)):
                raise _bad_setting(path, f"{key}[{i}]", v, "must be a power of 2 or 0")
            divisions[i] = v
    else:
        raise _bad_setting(path, key, table, "must be a dict {interval MiB: divisions} or a list of divisions")
    return tuple(divisions)


def _bad_setting(path: object, where: str, value: object, expected: str):
    """The error for the setting at ``allocator_settings{where}`` holding ``value``."""
    from veotrace.errors import TraceFormatError

    shown = repr(value) if isinstance(value, (int, float, str, bool, type(None))) else type(value).__name__
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**30:
        shown = f"an integer of {value.bit_length()} bits"
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    return TraceFormatError(f"allocator_settings{where} = {shown} {expected}", path=None if path is None else str(path),
                            hint="Fix that setting in the snapshot, or remove allocator_settings to assume "
                                 "PyTorch's defaults")
