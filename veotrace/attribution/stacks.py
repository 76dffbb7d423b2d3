"""An allocation's site: its first stack frame outside PyTorch and Python internals, interned per stack.

PyTorch records a stack with each trace entry and each block (``_record_memory_history(stacks=
"python")`` gives Python frames, ``"all"`` C++ ones too: ``torch::unwind::unwind()`` in ``??``). The
frames run from the innermost call outwards: the first one that is neither PyTorch's own code, nor
the Python standard library, nor C/C++ is the user's line that asked for the memory. ``--site-filter
REGEX`` replaces the rule for what counts as internal (matched against ``filename``), and
``--site-depth N`` keeps N user frames (``a.py:10 f < b.py:20 g``) to tell callers apart.
"""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass, field

from veotrace.errors import printable

#: Frames whose file matches this are internal: PyTorch's package, the standard library (a
#: ``lib/pythonX.Y/`` not under site-packages), frozen and generated modules, C/C++ frames (a source file,
#: or, where the unwinder found no source, the object or library the code is in: libstdc++'s
#: ``execute_native_thread_routine`` comes as ``thread48.o``).
DEFAULT_INTERNAL = (r"([\\/]torch[\\/]|[\\/]lib[\\/]python3\.\d+[\\/](?!site-packages)|^<|^\?\?$|"
                    r"\.(c|cc|cpp|cxx|cu|cuh|h|hh|hpp|o|a|so|dylib|dll)(\.\d+)*$|^$)")
#: The site of an entry without frames, and of one whose every frame is internal.
NO_FRAMES = "(no stack recorded)"
ALL_INTERNAL = "(only internal frames)"
#: The site of a stack of internal frames only that runs on the autograd engine's thread: the gradients
#: and their temporaries made by the backward pass (no Python frame: the engine's own C++ thread).
BACKWARD_THREAD = "backward pass (autograd engine thread)"
#: Frame names that show the autograd engine's thread (``torch/csrc/autograd/engine.cpp``,
#: ``python_engine.cpp``): its loop, its start, a node it evaluates.
AUTOGRAD_ENGINE = re.compile(r"torch::autograd::(python::PythonEngine::thread_init|Engine::thread_main|"
                             r"Engine::thread_init|Engine::evaluate_function|Engine::execute_with_graph_task)")
#: Sites that name no line of the user's code (the labels above).
LABELS = (NO_FRAMES, ALL_INTERNAL, BACKWARD_THREAD)
#: Blocks live before the trace started (its ring buffer dropped their alloc entries).
BEFORE_TRACE = "(allocated before the trace)"


@dataclass
class SiteRule:
    """Which frames are internal (``internal``, a regex on the frame's file) and how many user frames
    name a site (``depth``)."""

    internal: str = DEFAULT_INTERNAL
    depth: int = 1
    _re: re.Pattern = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._re = re.compile(self.internal)

    def site(self, frames) -> str:
        """The site of one stack (a list of ``{"filename", "line", "name"}`` dicts, innermost first)."""
        if not frames or not isinstance(frames, (list, tuple)):
            return NO_FRAMES
        user = []
        for f in frames:
            if not isinstance(f, dict):
                continue
            filename = str(f.get("filename", ""))
            if self._re.search(filename):
                continue
            user.append(printable(f"{filename}:{_line(f.get('line', '?'))} {f.get('name', '?')}"))
            if len(user) >= self.depth:
                break
        if user:
            return " < ".join(user)
        return internal_label(frames)


def internal_label(frames) -> str:
    """The site of a stack whose every frame is internal: the backward pass when the autograd engine's
    thread runs it (:data:`AUTOGRAD_ENGINE` among its frames' names), else :data:`ALL_INTERNAL`."""
    for f in frames:
        if isinstance(f, dict) and AUTOGRAD_ENGINE.search(str(f.get("name", ""))):
            return BACKWARD_THREAD
    return ALL_INTERNAL


def short_site(site: str, width: int = 70) -> str:
    """A site for a line of text, at most about ``width`` characters: each frame's ``file:line function``
    kept whole, its path cut at a separator from the start (``.../diffusers/models/attention.py:1262
    __call__``), never mid-name; the last file name and function stay even past ``width``."""
    if len(site) <= width or site in LABELS:
        return site
    frames = site.split(" < ")
    budget = max(16, (width - 3 * (len(frames) - 1)) // len(frames))
    out = []
    for fr in frames:
        path, sep, rest = fr.rpartition(":")
        if not sep or len(fr) <= budget:
            out.append(fr)
            continue
        parts = re.split(r"(?<=[\\/])", path)  # each part keeps its separator
        kept = parts[-1]
        for part in reversed(parts[:-1]):
            if len(part) + len(kept) + 4 + len(rest) + 1 > budget:
                break
            kept = part + kept
        out.append(("..." + ("" if kept.startswith(("/", "\\")) else "/") if kept != path else "") + kept + ":" + rest)
    return " < ".join(out)


def block_frames(block: dict):
    """A snapshot block's stack, in every layout the formats page lists: ``frames`` on the block
    (torch >= 2.1), or, in torch ~2.0 snapshots, the frames of its latest ``history`` record (the
    allocation that holds it now; ``torch/cuda/_memory_viz.py`` reads ``history[0]`` too). None when the
    block carries neither."""
    frames = block.get("frames")
    if frames:
        return frames
    history = block.get("history")
    if isinstance(history, (list, tuple)) and history and isinstance(history[0], dict):
        return history[0].get("frames") or frames
    return frames


_FIELDS = operator.itemgetter("filename", "line", "name")


def _line(v: object) -> object:
    """A frame's line as it can be shown and written as JSON: an integer as it is, anything else (a float NaN or
    infinity, a string) as its escaped text."""
    return v if type(v) is int else printable(v)


def shown_frame(key: tuple) -> tuple:
    """One (filename, line, name) frame as every output can carry it (issue 47): strings escaped (a lone
    surrogate, a control character), a line that is not an integer as its text (NaN and infinity are not
    JSON)."""
    filename, line, name = key
    return printable(filename), _line(line), printable(name)


class Interner:
    """Sites by stack: each distinct stack is matched once; memory grows with distinct stacks, not entries.

    ``codes`` maps a site to its index in ``sites``; ``of(frames)`` returns that index; ``stack_of`` the
    first stack met of each site (its (filename, line, name) frames, innermost first), for a viewer's
    hover.
    """

    def __init__(self, rule: SiteRule) -> None:
        self.rule = rule
        self.sites: list[str] = []
        self.codes: dict[str, int] = {}
        self._by_stack: dict = {}
        self._by_id: dict[int, int] = {}
        self.stack_of: dict[int, tuple] = {}

    def code(self, site: str) -> int:
        c = self.codes.get(site)
        if c is None:
            c = self.codes[site] = len(self.sites)
            self.sites.append(site)
        return c

    def of(self, frames) -> int:
        if not frames or not isinstance(frames, (list, tuple)):  # absent, or not a stack at all
            return self.code(NO_FRAMES)
        c = self._by_id.get(id(frames))  # a stack shared by the pickle's memo: one lookup
        if c is not None:
            return c
        try:  # the usual stack: dicts with all three fields, hashable
            key = tuple(map(_FIELDS, frames))
            c = self._by_stack.get(key)
        except (TypeError, KeyError):  # a field missing or not hashable (a list where a name should be): its text
            key = tuple((str(f.get("filename")), str(f.get("line")), str(f.get("name")))
                        for f in frames if isinstance(f, dict))
            c = self._by_stack.get(key)
        if c is None:
            c = self._by_stack[key] = self.code(self.rule.site(frames))
            if c not in self.stack_of:
                self.stack_of[c] = tuple(map(shown_frame, key))
        self._by_id[id(frames)] = c
        return c

    @property
    def stacks(self) -> int:
        return len(self._by_stack)
