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

Numbers are read as the release's C++ reads them (issue 47): up to 2.9 ``std::stoi`` (a 32-bit ``int``) for
sizes and divisions and ``std::stoul`` for division intervals, from 2.10 ``std::stoull`` (``toSizeT``) for all
of them, and ``std::stod`` for the fractions. Each skips leading C white space, takes an optional sign and
ASCII digits only (``١٢٨``, full-width digits or ``1_000``'s underscore are no digits to it) and stops at the
first character that is not part of the number: ``1_000`` is 1 (then too small), ``128abc`` is 128 (named
in the settings' notes). A number past the C++ type (``2**70``, more than 2^31-1 MiB up to 2.9) is
``std::out_of_range``; a negative one wraps to a huge ``size_t`` as PyTorch's assignment does (named in the
notes). The lexer drops spaces up to 2.9 and every C white space character from 2.10 (``ConfigTokenizer``).
A snapshot's fields are held to the same ranges (a ``size_t`` field past 2^64-1 cannot come from PyTorch).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace

from veotrace.errors import UsageError, shown

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


#: A torch version as ``torch.__version__`` prints it, in ASCII digits: MAJOR.MINOR[.PATCH][aN|bN|rcN][.devN][+local].
_VERSION = re.compile(r"([0-9]{1,3})\.([0-9]{1,3})(?:\.[0-9]{1,3})?(?:(?:a|b|rc)[0-9]{1,9})?(?:\.dev[0-9]{1,12})?"
                      r"(?:\+[A-Za-z0-9.]{1,64})?\Z", re.ASCII)


def release(text: str) -> tuple[int, int]:
    """``"2.9"``, ``"2.10.1"``, ``"2.9.0+cu128"`` -> (2, 9); refused past the releases modelled.

    Raises:
        UsageError: not a release veotrace models.
    """
    m = _VERSION.match(text.strip()) if isinstance(text, str) else None
    got = (int(m.group(1)), int(m.group(2))) if m else None
    if got is None or f"{got[0]}.{got[1]}" not in RELEASES:
        raise UsageError(f"--torch-version {shown(text, 80)}: not a release whose allocator settings veotrace models",
                         hint=f"Give one of {RELEASES[0]} ... {RELEASES[-1]} (the version torch.__version__ prints)")
    return got


def alloc_conf_variable(torch_release: str, *, rocm: bool = False) -> tuple[str, str | None]:
    """(the environment variable ``torch_release`` reads its allocator settings from without a warning, what to
    know about the other names), for a CUDA build or (``rocm``) a ROCm one.

    From 2.9 ``AcceleratorAllocatorConfig::instance()`` (``c10/core/AllocatorConfig.cpp``) reads
    ``PYTORCH_ALLOC_CONF`` first, then ``PYTORCH_CUDA_ALLOC_CONF`` and ``PYTORCH_HIP_ALLOC_CONF`` with
    ``TORCH_WARN_ONCE("... is deprecated, use PYTORCH_ALLOC_CONF instead")`` (the 2.9 builds print it). Up to
    2.8 only the old names exist: ``getenv("PYTORCH_CUDA_ALLOC_CONF")``, and on ROCm from 2.2
    (``CUDAAllocatorConfig.h``, ``#ifdef USE_ROCM``) ``PYTORCH_HIP_ALLOC_CONF`` when that one is unset; a ROCm
    2.0-2.1 build is given the CUDA name (its HIP fallback was not confirmed in its source).
    """
    rel = release(torch_release)
    old = "PYTORCH_HIP_ALLOC_CONF" if rocm else "PYTORCH_CUDA_ALLOC_CONF"
    if rel >= (2, 9):
        return "PYTORCH_ALLOC_CONF", (f"torch {torch_release} reads PYTORCH_ALLOC_CONF; {old} still works there, "
                                      "with a deprecation warning")
    if rocm and rel >= (2, 2):
        return old, (f"torch {torch_release} on ROCm reads PYTORCH_HIP_ALLOC_CONF when PYTORCH_CUDA_ALLOC_CONF is "
                     "unset; PYTORCH_ALLOC_CONF is read from 2.9 only")
    return "PYTORCH_CUDA_ALLOC_CONF", f"torch {torch_release} knows only the old name (PYTORCH_ALLOC_CONF is read from 2.9)"


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


#: What C's ``isspace`` is true of (the C locale): ``std::sto*`` skip it before a number; ``ConfigTokenizer`` (2.10)
#: drops it everywhere, ``lexArgs`` (up to 2.9) drops only the space.
_C_SPACE = " \t\n\v\f\r"
#: ``strtod``'s number in the C locale: hexadecimal, decimal, inf/infinity, nan(...), ASCII only.
_STOD = re.compile(r"[+-]?(?:(?P<hex>0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)(?:[pP][+-]?[0-9]+)?)"
                   r"|(?P<dec>(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)"
                   r"|(?P<inf>[iI][nN][fF](?:[iI][nN][iI][tT][yY])?)|(?P<nan>[nN][aA][nN](?:\([0-9A-Za-z_]*\))?))", re.ASCII)
_STOI = re.compile(r"[+-]?([0-9]+)", re.ASCII)
#: The C++ integer each ``std::sto*`` returns: (smallest, largest) of its range before any cast.
_C_INT = {"stoi": (-(1 << 31), (1 << 31) - 1), "stoul": (None, (1 << 64) - 1), "stoull": (None, (1 << 64) - 1)}
SIZE_T = 1 << 64


def _lex(text: str, rel: tuple[int, int] = (2, 10)) -> list[str]:
    """``lexArgs`` (up to 2.9) / ``ConfigTokenizer`` (2.10): split on , : [ ] keeping them as tokens; spaces are
    dropped (every C white space character from 2.10)."""
    drop = " " if rel < (2, 10) else _C_SPACE
    tokens, buf = [], []
    for ch in text:
        if ch in ",:[]":
            if buf:
                tokens.append("".join(buf))
                buf = []
            tokens.append(ch)
        elif ch not in drop:
            buf.append(ch)
    if buf:
        tokens.append("".join(buf))
    return tokens


class _Bad(Exception):
    """One problem of a settings string: what PyTorch (or veotrace) says of it. ``torch``: PyTorch itself
    refuses it (an exception when the allocator reads the string), not only veotrace's model."""

    def __init__(self, why: str, torch: bool = True) -> None:
        super().__init__(why)
        self.torch = torch


def _sto(tok: str, what: str, fn: str, notes: list[str] | None = None) -> int:
    """``std::stoi``/``stoul``/``stoull`` of a token as PyTorch calls them: leading C white space, a sign, ASCII
    digits; what follows the digits is ignored (said in ``notes``). Returns the value as the ``size_t`` PyTorch
    assigns it to holds it (a negative number wraps: ``strtoull`` negates in unsigned arithmetic, and a
    negative ``int`` from ``std::stoi`` converts so; said in ``notes``).

    Raises:
        _Bad: no ASCII digits (``std::invalid_argument``), or past the function's type (``std::out_of_range``).
    """
    body = tok.lstrip(_C_SPACE)
    m = _STOI.match(body)
    if m is None:
        raise _Bad(f"{what}: {shown(tok, 60)} is not a number to PyTorch (std::{fn} reads ASCII digits only: "
                   "std::invalid_argument)")
    digits = m.group(1).lstrip("0") or "0"
    lo, hi = _C_INT[fn]
    if len(digits) > 25 or int(digits) > (hi if lo is None or body[0] != "-" else -lo):
        raise _Bad(f"{what}: {shown(tok, 60)} is past the range of std::{fn} "
                   f"({'a 32-bit int' if fn == 'stoi' else 'a 64-bit unsigned integer'}: std::out_of_range)")
    v = int(digits) * (-1 if body[0] == "-" else 1)
    if v < 0:  # strtoull negates in unsigned arithmetic; stoi's int is assigned to a size_t: both wrap
        v %= SIZE_T
        if notes is not None:
            notes.append(f"{what}:{tok}: PyTorch reads the negative number as {v:,} (a size_t: it wraps)")
    rest = body[m.end():]
    if rest and notes is not None:
        notes.append(f"{what}:{tok}: PyTorch reads {m.group()} and ignores {shown(rest, 40)} (std::{fn} stops at the "
                     "first character that is not a digit)")
    return v


def _stod(tok: str, what: str, notes: list[str] | None = None) -> float:
    """``std::stod`` of a token (the C locale): leading C white space, then a decimal or hexadecimal number,
    ``inf`` or ``nan``, in ASCII; what follows is ignored (said in ``notes``).

    Raises:
        _Bad: no number (``std::invalid_argument``), or past a double either way (``std::out_of_range``).
    """
    body = tok.lstrip(_C_SPACE)
    m = _STOD.match(body)
    if m is None:
        raise _Bad(f"{what}: {shown(tok, 60)} is not a number to PyTorch (std::stod reads ASCII digits only: "
                   "std::invalid_argument)")
    text = m.group()
    if m.group("hex"):
        v = float.fromhex(text)
    elif m.group("dec"):
        mantissa = re.split("[eE]", text)[0]
        v = float(text) if len(text) < 1000 else (math.inf if mantissa.strip("+-0.") else 0.0)
        if math.isinf(v) or (abs(v) < 2.2250738585072014e-308 and mantissa.strip("+-0.")):
            raise _Bad(f"{what}: {shown(tok, 60)} is past the range of a double (std::stod: std::out_of_range)")
    else:
        v = float(text.split("(")[0])
    rest = body[m.end():]
    if rest and notes is not None:
        notes.append(f"{what}:{tok}: PyTorch reads {text} and ignores {shown(rest, 40)} (std::stod stops at the first "
                     "character that is not part of a number)")
    return v


def _pow2(v: int) -> bool:
    return v > 0 and v & (v - 1) == 0


def _divisions(toks: list[str], i: int, rel: tuple[int, int], notes: list[str]) -> tuple[tuple[int, ...], int]:
    """``parseRoundUpPower2Divisions``: ``4`` (all intervals) or ``[256:1,512:2,>:8]`` (MiB: divisions). The first
    named value fills the intervals before it too; ``>`` fills from the last named interval (up to 2.9) or
    the one after it (from 2.10) to the end; a division of 0 (no rounding) is accepted from 2.4. Divisions are
    ``std::stoi`` up to 2.9 (then cast to ``size_t``), intervals ``std::stoul``; both ``std::stoull`` from 2.10."""
    fn_div, fn_key = ("stoi", "stoul") if rel < (2, 10) else ("stoull", "stoull")
    what = "roundup_power2_divisions"
    table = [0] * ROUNDUP_INTERVALS
    if i < len(toks) and toks[i] != "[":
        v = _sto(toks[i], what, fn_div, notes)
        if not _pow2(v):
            raise _Bad("roundup_power2_divisions must be a power of 2")
        return (v,) * ROUNDUP_INTERVALS, i
    first, last = True, 0
    i += 1
    while i < len(toks) and toks[i] != "]":
        key = toks[i]
        if i + 2 >= len(toks) or toks[i + 1] != ":":
            raise _Bad("roundup_power2_divisions entries are INTERVAL_MB:DIVISIONS")
        v = _sto(toks[i + 2], what, fn_div, notes)
        if v and not _pow2(v) or not v and rel < (2, 4):
            raise _Bad("roundup_power2_divisions: divisions must be a power of 2" + (" or 0" if rel >= (2, 4) else ""))
        if key == ">":
            start = last if rel < (2, 10) else last + 1
            table[start:] = [v] * (ROUNDUP_INTERVALS - start)
        else:
            mb = _sto(key, f"{what} interval", fn_key, notes)
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


def _values(text: str, rel: tuple[int, int]) -> tuple[dict, list[str], list[tuple[str, str, bool]], list[str]]:
    """The modelled values a string sets, the options it sets that change nothing modelled, its problems as
    (option, why, PyTorch refuses it too), and how PyTorch reads numbers that say more than it reads (trailing
    characters ignored, a negative number wrapped); parsed as release ``rel`` parses it."""
    toks = _lex(text, rel)
    i, values, inert, problems, notes = 0, {}, [], [], []
    smallest = 20 if rel >= (2, 10) else 21  # '>= 20' from 2.10, '> 20' up to 2.9
    fn = "stoi" if rel < (2, 10) else "stoull"
    while i < len(toks):
        key = toks[i]
        if i + 2 >= len(toks) or toks[i + 1] != ":":
            problems.append((key, f"option {shown(key, 60)} needs a value, as {shown(key, 60)}:VALUE", True))
            break
        i += 2
        tok = toks[i]
        since, effect = OPTIONS.get(key, (None, None))
        try:
            if since is None:
                raise _Bad(f"Unrecognized CachingAllocator option: {shown(key, 60)[1:-1]}" if rel < (2, 10) else
                           f"Unrecognized key {shown(key, 60)} in CUDA allocator config")
            if release(since) > rel:
                raise _Bad(f"first accepted by torch {since} (torch {rel[0]}.{rel[1]} refuses it: "
                           + ("Unrecognized CachingAllocator option)" if rel < (2, 10) else "Unrecognized key)"))
            if key in ("max_split_size_mb", "max_non_split_rounding_mb"):
                v = _sto(tok, key, fn, notes)  # size_t val_env = stoi(...) (to 2.9) / toSizeT(...)
                if v < smallest:
                    raise _Bad(f"{key} too small, must be {'>= 20' if smallest == 20 else '> 20'}"
                               + (f" (PyTorch reads {shown(tok, 40)} as {v})" if str(v) != tok else ""))
                v = min(v, NO_LIMIT // MB)  # val_env = std::min(val_env, max_allowed_split_size_mb)
                values["max_split_size" if key == "max_split_size_mb" else "max_non_split_rounding_size"] = v * MB
            elif key == "garbage_collection_threshold":
                v = _stod(tok, key, notes)
                if not 0.0 < v < 1.0:
                    raise _Bad("garbage_collection_threshold must be in (0.0, 1.0)")
                values["garbage_collection_threshold"] = v
            elif key == "per_process_memory_fraction":
                v = _stod(tok, key, notes)
                if not 0.0 <= v <= 1.0:  # val_env >= 0.0 && val_env <= 1.0 (0: nothing can be allocated)
                    raise _Bad("per_process_memory_fraction is invalid, set it in [0.0, 1.0]")
                values["per_process_memory_fraction"] = v
            elif key == "roundup_power2_divisions":
                values["roundup_power2_divisions"], i = _divisions(toks, i, rel, notes)
            elif key == "expandable_segments":
                if tok not in ("True", "False"):
                    raise _Bad("expandable_segments expects True or False")
                values["expandable_segments"] = tok == "True"
            elif key == "backend":
                if tok != "native":
                    raise _Bad(f"backend:{shown(tok, 60)} is not modelled (only the native caching allocator is)",
                               torch=tok not in ("cudaMallocAsync", "hipMallocAsync"))
            elif effect == "none":
                inert.append(f"{key}:{tok}")
            else:
                raise _Bad(f"not modelled: {effect}", torch=False)
        except _Bad as exc:
            problems.append((key, str(exc), exc.torch))
        i += 1
        if i < len(toks):
            if toks[i] != ",":
                problems.append((key, f"expected ',' after {key}, got {shown(toks[i], 60)}", True))
                break
            i += 1
    return values, inert, problems, notes


#: A memory fraction on the command line (``--fraction``): a decimal number in ASCII digits.
_FRACTION = re.compile(r"\+?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\Z", re.ASCII)


def parse_fraction(value: object, option: str = "--fraction") -> float:
    """A memory fraction in [0, 1] as ``torch.cuda.set_per_process_memory_fraction`` takes it (``fraction < 0 or
    fraction > 1`` is refused there; 0 is accepted: nothing can be allocated), written in ASCII digits
    (``٠.٥`` or ``0_5`` is refused, as ``--capacity ٨٠GiB`` is).

    Raises:
        UsageError: not such a number (naming ``option``).
    """
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        f = float(value)
    elif isinstance(value, str) and _FRACTION.match(value.strip(_C_SPACE)):
        f = float(value.strip(_C_SPACE))
    else:
        f = math.nan
    if not 0.0 <= f <= 1.0:
        raise UsageError(f"{option} {shown(value, 60)}: a memory fraction is a number in [0, 1] in ASCII digits",
                         hint="the share of the device's memory the process may reserve, as "
                              "torch.cuda.set_per_process_memory_fraction takes it (0: nothing can be allocated)")
    return f


def parse_conf(text: str, *, base: TorchConf | None = None, torch_release: str = DEFAULT_RELEASE,
               release_from: str | None = None) -> TorchConf:
    """Parse a ``PYTORCH_CUDA_ALLOC_CONF`` string (e.g. ``"expandable_segments:True,max_split_size_mb:128"``) as
    ``torch_release`` does. ``release_from``: how that release was chosen (``simulate.release_of``), named when
    an option does not exist in it, with ``--torch-version`` to override it.

    Raises:
        UsageError: an option that release refuses or a value it refuses (one line naming it, the string cut to
            200 characters), or an option that changes allocations in a way the model does not follow.
    """
    rel = release(torch_release)
    values, inert, problems, readings = _values(text, rel)
    if problems:
        key, why, _torch = problems[0]
        what = (f"unknown option {shown(key, 60)} (torch {torch_release}: {why})" if why.startswith("Unrecognized") else
                f"option {shown(key, 60)}: {why}" if why.startswith(("first", "not model")) else why)
        if why.startswith(("first", "Unrecognized")) and release_from and release_from != "--torch-version":
            what += (f"; torch {torch_release} was inferred from {release_from.split('; ')[0]}, and --torch-version "
                     "overrides it")
        raise UsageError(f"--conf {shown(text)}: {what}",
                         hint=f"Options are {', '.join(k for k, (s, e) in OPTIONS.items() if e == 'modelled' and release(s) <= rel)}"
                              f" (as {alloc_conf_variable(torch_release)[0]}, torch {torch_release})")
    notes = tuple(_bounded([f"{o}: accepted, {NO_EFFECT}" for o in inert] + readings))
    return replace(base or TorchConf(), source=f"--conf {shown(text)}", torch_release=torch_release, notes=notes,
                   **values)


#: The most of a recorded settings string kept in ``recorded["string"]`` (and so in every output).
RECORDED_CHARS = 1000
#: The most lines of one kind (notes, options not understood) a settings string gives.
MAX_LINES = 20


def _bounded(lines: list[str]) -> list[str]:
    """``lines`` once each, at most MAX_LINES of them, then how many more (a string of 150,000 options)."""
    once = list(dict.fromkeys(shown(x, 300)[1:-1] if len(x) > 300 else x for x in lines))
    return once if len(once) <= MAX_LINES else once[:MAX_LINES] + [f"... and {len(once) - MAX_LINES:,} more"]


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
    if not _whole(mss) or mss < -1 or mss > NO_LIMIT:
        raise _bad_setting(path, "['max_split_size']", mss, "must be a byte count (a size_t: at most 2^64-1), or -1 "
                                                           "for no limit")
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
    not_understood, contradictions, inert, readings, refused = [], [], [], [], None
    values: dict = {}
    if isinstance(text, str) and text.strip():
        values, inert, problems, readings = _values(text, release(torch_release))
        not_understood = _bounded([f"{key} ({why})" for key, why, torch in problems if not torch])
        first = next(((key, why) for key, why, torch in problems if torch), None)
        if first is not None:  # the allocator raises on it: the string cannot have been parsed as it stands
            refused = (f"torch {torch_release} would have refused it ({first[1]}); the replay follows the fields "
                       "and the options before it")
        for name, value in values.items():
            if name in fields and value != fields[name]:
                contradictions.append(f"PYTORCH_CUDA_ALLOC_CONF sets {name} to {_shown(name, value)} but the field holds "
                                      f"{_shown(name, fields[name])}: the field wins (the allocator's value when the "
                                      "snapshot was taken; the string is the last one parsed)")
        read.append("PYTORCH_CUDA_ALLOC_CONF")
    merged = {**{k: v for k, v in values.items() if k not in fields}, **fields}
    if isinstance(text, str) and len(text) > RECORDED_CHARS:  # a 5 MB string must not make every output 5 MB
        text = text[:RECORDED_CHARS] + f"... ({len(text):,} characters in all)"
    recorded = {"read": read + [f"PYTORCH_CUDA_ALLOC_CONF: {k}" for k in values if k not in fields],
                "not_understood": not_understood, "contradictions": contradictions, "string": text,
                **({"refused": refused} if refused else {})}
    return TorchConf(**merged, source="snapshot allocator_settings", torch_release=torch_release,
                     notes=tuple(_bounded([f"{o}: accepted, {NO_EFFECT}" for o in inert] + readings)), recorded=recorded)


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
            if not _whole(v) or v < 0 or v > NO_LIMIT or (v and not _pow2(v)):
                raise _bad_setting(path, f"{key}[{shown(k, 40)}]", v, "must be a power of 2 or 0")
            idx = mb.bit_length() - 1
            if idx < ROUNDUP_INTERVALS:
                divisions[idx] = v
    elif isinstance(table, (list, tuple)):
        for i, v in enumerate(table[:ROUNDUP_INTERVALS]):
            if not _whole(v) or v < 0 or v > NO_LIMIT or (v and not _pow2(v)):
                raise _bad_setting(path, f"{key}[{i}]", v, "must be a power of 2 or 0")
            divisions[i] = v
    else:
        raise _bad_setting(path, key, table, "must be a dict {interval MiB: divisions} or a list of divisions")
    return tuple(divisions)


def _bad_setting(path: object, where: str, value: object, expected: str):
    """The error for the setting at ``allocator_settings{where}`` holding ``value``."""
    from veotrace.errors import TraceFormatError

    text = shown(value, 60) if isinstance(value, (int, float, str, bool, type(None))) else type(value).__name__
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**30:
        text = f"an integer of {value.bit_length()} bits"
    return TraceFormatError(f"allocator_settings{where} = {text} {expected}", path=None if path is None else str(path),
                            hint="Fix that setting in the snapshot, or remove allocator_settings to assume "
                                 "PyTorch's defaults")
