"""Allocator settings, release by release: ``PYTORCH_CUDA_ALLOC_CONF`` strings and a snapshot's ``allocator_settings``
-> TorchConf.

The option names, their first release, bounds and the ``roundup_power2_divisions`` table follow each
release's parser, read from the release builds (``c10/cuda/CUDACachingAllocator.cpp``'s
``CachingAllocatorConfig`` in 2.0-2.1, ``c10/cuda/CUDAAllocatorConfig.cpp`` in 2.2-2.9,
``c10/core/AllocatorConfig.cpp`` ``AcceleratorAllocatorConfig`` with ``CUDAAllocatorConfig`` from 2.10;
``lexArgs``, ``parseMaxSplitSize``, ``parseRoundUpPower2Divisions``, ``parsePerProcessMemoryFraction``).
What changes between releases, and is modelled here: which options exist (:data:`OPTIONS`); the
smallest ``max_split_size_mb``/``max_non_split_rounding_mb`` (``> 20`` up to 2.9, ``>= 20`` from 2.10);
a division of 0 in the list form (from 2.4); the ``>`` entry of the list form, which fills from the last
named interval on up to 2.9 (overwriting it) and from the one after it from 2.10; and
``per_process_memory_fraction`` (2.10), whose limit applies only below 1.0 from 2.10, at any value
before (``setMemoryFraction``). An option a release refuses is refused with its release's words; one
that does not change where device memory goes (pinned memory, locks) is accepted and named in the
settings' notes; one that changes it but is not modelled is refused, never silently ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from veotrace.errors import UsageError

MB = 1 << 20
#: kLargeBuffer: the bound of max_split_size_mb and max_non_split_rounding_mb is kLargeBuffer / 1 MiB = 20.
K_LARGE_BUFFER = 20 * MB
#: Power-of-two intervals for roundup_power2_divisions: 1 MiB ... 32 GiB and above (16 entries).
ROUNDUP_INTERVALS = 16
#: max_split_size default: SIZE_MAX (no limit).
NO_LIMIT = (1 << 64) - 1
#: The releases whose settings semantics are modelled, and the one assumed when nothing says.
RELEASES = tuple(f"2.{m}" for m in range(16))
DEFAULT_RELEASE = "2.15"

#: Each option: (first release accepting it, what it does to the model). "modelled": it changes where device
#: memory goes and the model follows it; "none": it does not (pinned host memory, locks, CUDA-graph stream
#: reuse, which the model leaves out), accepted and named; anything else is why it is refused.
OPTIONS: dict[str, tuple[str, str]] = {
    "max_split_size_mb": ("2.0", "modelled"),
    "roundup_power2_divisions": ("2.0", "modelled"),
    "garbage_collection_threshold": ("2.0", "modelled"),
    "backend": ("2.0", "modelled"),
    "expandable_segments": ("2.1", "modelled"),
    "release_lock_on_cudamalloc": ("2.2", "none"),
    "release_lock_on_hipmalloc": ("2.2", "none"),
    "pinned_use_cuda_host_register": ("2.2", "none"),
    "pinned_use_hip_host_register": ("2.2", "none"),
    "pinned_num_register_threads": ("2.2", "none"),
    "max_non_split_rounding_mb": ("2.6", "modelled"),
    "pinned_use_background_threads": ("2.6", "none"),
    "graph_capture_record_stream_reuse": ("2.9", "none"),
    "pinned_reserve_segment_size_mb": ("2.10", "none"),
    "per_process_memory_fraction": ("2.10", "modelled"),
    "large_segment_size_mb": ("2.11", "it changes the 20 MiB segment of 1-10 MiB requests, which the model keeps"),
    "pinned_free_catch_all": ("2.12", "none"),
    "throw_on_cudamalloc_oom": ("2.12", "it makes a malloc over the fraction fail before any retry, which the "
                                        "model does not do"),
    "pinned_max_round_threshold_mb": ("2.13", "none"),
    "pinned_max_cached_size_mb": ("2.13", "none"),
    "expandable_segments_reserve": ("2.15", "it reserves expandable segments ahead, which the model does not"),
    "expandable_segments_reserve_by_class": ("2.15", "it reserves expandable segments ahead, which the model does not"),
}
#: Why an option with no effect on the model is accepted.
NO_EFFECT = "does not change which device memory is reserved (pinned host memory, locks, CUDA graphs)"


def release(text: str) -> tuple[int, int]:
    """``"2.9"``, ``"2.10.1"``, ``"2.9.0+cu128"`` -> (2, 9); refused past the releases modelled.

    Raises:
        UsageError: not a release veotrace models.
    """
    head = text.strip().split("+")[0].split(".")
    try:
        got = (int(head[0]), int(head[1]))
    except (ValueError, IndexError):
        got = None
    if got is None or f"{got[0]}.{got[1]}" not in RELEASES:
        raise UsageError(f"--torch-version {text!r}: not a release whose allocator settings veotrace models",
                         hint=f"Give one of {RELEASES[0]} ... {RELEASES[-1]} (the version torch.__version__ prints)")
    return got


@dataclass(frozen=True)
class TorchConf:
    """The settings of PyTorch's caching allocator that decide reserved memory, under one release's rules."""

    max_split_size: int = NO_LIMIT
    max_non_split_rounding_size: int = K_LARGE_BUFFER
    garbage_collection_threshold: float = 0.0
    roundup_power2_divisions: tuple[int, ...] = field(default_factory=lambda: (0,) * ROUNDUP_INTERVALS)
    expandable_segments: bool = False
    #: set_per_process_memory_fraction / the per_process_memory_fraction option (None: never set).
    per_process_memory_fraction: float | None = None
    source: str = "defaults"
    #: The release whose rules apply (parsing, and whether a fraction of 1.0 limits anything).
    torch_release: str = DEFAULT_RELEASE
    #: Options accepted that do not change the model's allocations, and the recorded settings' reading.
    notes: tuple[str, ...] = field(default=(), compare=False)
    recorded: dict | None = field(default=None, compare=False)

    def divisions_for(self, size: int) -> int:
        """``roundup_power2_divisions(size)``: the entry of size's power-of-two interval."""
        index = size.bit_length() - 1 - 20
        return self.roundup_power2_divisions[min(max(index, 0), ROUNDUP_INTERVALS - 1)]

    def allowed_maximum(self, device_memory: int | None) -> int | None:
        """``allowed_memory_maximum``: the fraction of the device's memory the process may reserve, or None
        when no limit is set (``setMemoryFraction``: up to 2.9 any fraction sets it; from 2.10 only one
        below 1.0)."""
        f = self.per_process_memory_fraction
        if f is None or device_memory is None or (f >= 1.0 and release(self.torch_release) >= (2, 10)):
            return None
        return int(f * device_memory)

    def gc_threshold_bytes(self, device_memory: int | None) -> int | None:
        """The reserved bytes past which garbage_collection_threshold frees cached blocks: the threshold times
        ``allowed_memory_maximum`` (malloc runs garbage_collect_cached_blocks only when a fraction is set:
        ``set_fraction &&`` up to 2.9, ``allowed_memory_maximum.has_value() &&`` from 2.10); None when off."""
        allowed = self.allowed_maximum(device_memory)
        if self.garbage_collection_threshold > 0 and allowed is not None:
            return int(self.garbage_collection_threshold * allowed)
        return None

    def key(self) -> tuple:
        """The settings without their source: equal for two TorchConfs that allocate alike."""
        return (self.max_split_size, self.max_non_split_rounding_size, self.garbage_collection_threshold,
                tuple(self.roundup_power2_divisions), self.expandable_segments, self.per_process_memory_fraction)

    def same(self, other: TorchConf | None) -> bool:
        """The same settings as ``other`` (whatever their source)."""
        return other is not None and self.key() == other.key()

    def to_dict(self) -> dict:
        out = {
            "max_split_size": None if self.max_split_size == NO_LIMIT else self.max_split_size,
            "max_non_split_rounding_size": self.max_non_split_rounding_size,
            "garbage_collection_threshold": self.garbage_collection_threshold,
            "roundup_power2_divisions": list(self.roundup_power2_divisions),
            "expandable_segments": self.expandable_segments,
            "per_process_memory_fraction": self.per_process_memory_fraction,
            "source": self.source,
            "torch_release": self.torch_release,
            "notes": list(self.notes),
        }
        if self.recorded is not None:
            out["recorded"] = self.recorded
        return out


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


class _Bad(Exception):
    """One problem of a settings string: what PyTorch (or veotrace) says of it."""


def _int(tok: str, what: str) -> int:
    try:
        return int(tok)
    except ValueError:
        raise _Bad(f"{what} expects an integer, got {tok!r}") from None


def _pow2(v: int) -> bool:
    return v > 0 and v & (v - 1) == 0


def _divisions(toks: list[str], i: int, rel: tuple[int, int]) -> tuple[tuple[int, ...], int]:
    """``parseRoundUpPower2Divisions``: ``4`` (all intervals) or ``[256:1,512:2,>:8]`` (MiB: divisions). The first
    named value fills the intervals before it too; ``>`` fills from the last named interval (up to 2.9) or
    the one after it (from 2.10) to the end; a division of 0 (no rounding) is accepted from 2.4."""
    table = [0] * ROUNDUP_INTERVALS
    if i < len(toks) and toks[i] != "[":
        v = _int(toks[i], "roundup_power2_divisions")
        if not _pow2(v):
            raise _Bad("roundup_power2_divisions must be a power of 2")
        return (v,) * ROUNDUP_INTERVALS, i
    first, last = True, 0
    i += 1
    while i < len(toks) and toks[i] != "]":
        key = toks[i]
        if i + 2 >= len(toks) or toks[i + 1] != ":":
            raise _Bad("roundup_power2_divisions entries are INTERVAL_MB:DIVISIONS")
        v = _int(toks[i + 2], "roundup_power2_divisions")
        if v and not _pow2(v) or not v and rel < (2, 4):
            raise _Bad("roundup_power2_divisions: divisions must be a power of 2" + (" or 0" if rel >= (2, 4) else ""))
        if key == ">":
            start = last if rel < (2, 10) else last + 1
            table[start:] = [v] * (ROUNDUP_INTERVALS - start)
        else:
            mb = _int(key, "roundup_power2_divisions interval")
            if not _pow2(mb):
                raise _Bad("roundup_power2_divisions: intervals must be powers of 2 (MiB)")
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
        raise _Bad("roundup_power2_divisions list is missing its ']'")
    return tuple(table), i


def _values(text: str, rel: tuple[int, int]) -> tuple[dict, list[str], list[tuple[str, str]]]:
    """The modelled values a string sets, the options it sets that change nothing modelled, and its
    problems as (option, why); parsed as release ``rel`` parses it."""
    toks = _lex(text)
    i, values, inert, problems = 0, {}, [], []
    smallest = 20 if rel >= (2, 10) else 21  # '>= 20' from 2.10, '> 20' up to 2.9
    while i < len(toks):
        key = toks[i]
        if i + 2 >= len(toks) or toks[i + 1] != ":":
            problems.append((key, f"option {key!r} needs a value, as {key}:VALUE"))
            break
        i += 2
        tok = toks[i]
        since, effect = OPTIONS.get(key, (None, None))
        try:
            if since is None:
                raise _Bad("Unrecognized CachingAllocator option" if rel < (2, 10) else
                           f"Unrecognized key '{key}' in CUDA allocator config")
            if release(since) > rel:
                raise _Bad(f"first accepted by torch {since} (torch {rel[0]}.{rel[1]} refuses it: "
                           + ("Unrecognized CachingAllocator option)" if rel < (2, 10) else "Unrecognized key)"))
            if key in ("max_split_size_mb", "max_non_split_rounding_mb"):
                v = _int(tok, key)
                if v < smallest:
                    raise _Bad(f"{key} too small, must be {'>= 20' if smallest == 20 else '> 20'}")
                values["max_split_size" if key == "max_split_size_mb" else "max_non_split_rounding_size"] = v * MB
            elif key == "garbage_collection_threshold":
                v = _float(tok, key)
                if not 0.0 < v < 1.0:
                    raise _Bad("garbage_collection_threshold must be in (0.0, 1.0)")
                values["garbage_collection_threshold"] = v
            elif key == "per_process_memory_fraction":
                v = _float(tok, key)
                if not 0.0 < v <= 1.0:
                    raise _Bad("per_process_memory_fraction must be in (0.0, 1.0] (0 leaves no memory)")
                values["per_process_memory_fraction"] = v
            elif key == "roundup_power2_divisions":
                values["roundup_power2_divisions"], i = _divisions(toks, i, rel)
            elif key == "expandable_segments":
                if tok not in ("True", "False"):
                    raise _Bad("expandable_segments expects True or False")
                values["expandable_segments"] = tok == "True"
            elif key == "backend":
                if tok != "native":
                    raise _Bad(f"backend:{tok} is not modelled (only the native caching allocator is)")
            elif effect == "none":
                inert.append(f"{key}:{tok}")
            else:
                raise _Bad(f"not modelled: {effect}")
        except _Bad as exc:
            problems.append((key, str(exc)))
        i += 1
        if i < len(toks):
            if toks[i] != ",":
                problems.append((key, f"expected ',' after {key}, got {toks[i]!r}"))
                break
            i += 1
    return values, inert, problems


def _float(tok: str, what: str) -> float:
    try:
        return float(tok)
    except ValueError:
        raise _Bad(f"{what} expects a number, got {tok!r}") from None


def parse_conf(text: str, *, base: TorchConf | None = None, torch_release: str = DEFAULT_RELEASE) -> TorchConf:
    """Parse a ``PYTORCH_CUDA_ALLOC_CONF`` string (e.g. ``"expandable_segments:True,max_split_size_mb:128"``) as
    ``torch_release`` does.

    Raises:
        UsageError: an option that release refuses or a value it refuses (one line naming it), or an option
            that changes allocations in a way the model does not follow.
    """
    rel = release(torch_release)
    values, inert, problems = _values(text, rel)
    if problems:
        key, why = problems[0]
        what = (f"unknown option {key!r} (torch {torch_release}: {why})" if why.startswith("Unrecognized") else
                f"option {key!r}: {why}" if why.startswith(("first", "not model")) else why)
        raise UsageError(f"--conf {text!r}: {what}",
                         hint=f"Options are {', '.join(k for k, (s, e) in OPTIONS.items() if e == 'modelled' and release(s) <= rel)}"
                              f" (as PYTORCH_CUDA_ALLOC_CONF, torch {torch_release})")
    notes = tuple(f"{o}: accepted, {NO_EFFECT}" for o in inert)
    return replace(base or TorchConf(), source=f"--conf {text!r}", torch_release=torch_release, notes=notes, **values)


def from_settings(settings: object, *, path: object = None, torch_release: str = DEFAULT_RELEASE) -> TorchConf:
    """TorchConf from a snapshot's ``allocator_settings`` dict (FORMATS.md C.5) and the settings string it
    carries (``PYTORCH_CUDA_ALLOC_CONF``: the last string the allocator parsed).

    The fields are the allocator's own values when the snapshot was taken; the string adds what the fields
    do not hold (``max_non_split_rounding_mb``, ``per_process_memory_fraction``). Where the string says
    otherwise than a field, the field wins (a later ``_set_allocator_settings`` or default can change a
    value after the string was read) and the contradiction is listed. ``recorded`` on the result lists the
    settings read, the ones not understood (each named once) and the contradictions.

    The fields are the file's input like any other: a value PyTorch never writes there (a string for a
    number, a division that is not a power of two) is refused, naming ``path`` and the key.

    Raises:
        TraceFormatError: settings that are not a dict, or a field of the wrong type or range.
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
    fields = {"max_split_size": NO_LIMIT if mss < 0 or mss >= NO_LIMIT else mss,
              "garbage_collection_threshold": float(gc),
              "roundup_power2_divisions": _settings_divisions(settings.get("roundup_power2_divisions") or {}, path),
              "expandable_segments": bool(expandable)}
    read = [k for k in ("max_split_size", "garbage_collection_threshold", "roundup_power2_divisions",
                        "expandable_segments") if k in settings]
    text = settings.get("PYTORCH_CUDA_ALLOC_CONF")
    not_understood, contradictions, inert = [], [], []
    values: dict = {}
    if isinstance(text, str) and text.strip():
        values, inert, problems = _values(text, release(torch_release))
        not_understood = [f"{key} ({why})" for key, why in problems]
        for name, value in values.items():
            if name in fields and value != fields[name]:
                contradictions.append(f"PYTORCH_CUDA_ALLOC_CONF sets {name} to {_shown(name, value)} but the field holds "
                                      f"{_shown(name, fields[name])}: the field wins (the allocator's value when the "
                                      "snapshot was taken; the string is the last one parsed)")
        read.append("PYTORCH_CUDA_ALLOC_CONF")
    merged = {**{k: v for k, v in values.items() if k not in fields}, **fields}
    recorded = {"read": read + [f"PYTORCH_CUDA_ALLOC_CONF: {k}" for k in values if k not in fields],
                "not_understood": not_understood, "contradictions": contradictions, "string": text}
    return TorchConf(**merged, source="snapshot allocator_settings", torch_release=torch_release,
                     notes=tuple(f"{o}: accepted, {NO_EFFECT}" for o in inert), recorded=recorded)


def _shown(name: str, value: object) -> str:
    if name == "max_split_size":
        return "no limit" if value == NO_LIMIT else f"{value // MB} MiB"
    return repr(value)


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
