"""Synthetic data: PyTorch snapshots of the shapes issue 49 found the first answer misread, each with its truth.

Each program runs on :class:`veotrace.synth.caching.CachingAllocator` (PyTorch's caching rules, written
again), and each recorded entry carries the stack PyTorch would give it (``_record_memory_history(
stacks="all")``: C++ frames, Python frames, the user's lines):

- :func:`backward_thread`: training steps whose gradients are made on the autograd engine's thread (every
  frame C++: ``torch::autograd::Engine::thread_main``, ..., libstdc++'s ``thread48.o``), kept live as
  ``.grad`` to the end;
- :func:`opening_empty_cache`: a program that calls ``torch.cuda.empty_cache()`` as recording starts,
  giving back most of a fragmented cache, then runs ``steps`` steps ``step_s`` apart on a smaller working
  set (a short run of it is also an all-tie grid for ``tune``: every setting's peak is the state before
  recording);
- :func:`forward_pass`: one forward pass of ``span_s`` seconds, layers in bursts, its size classes growing
  more varied layer by layer (a rising entropy, which is what one pass looks like);
- :func:`oom_dump`: the snapshot an OOM handler dumps without a trace: who holds the memory is all it says;
- :func:`hidden_reserve`: a snapshot that contradicts itself: its trace holds far more live bytes than its
  segments reserve, and it records no segment event.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from veotrace.synth.caching import CachingAllocator, MiB, OutOfMemory, Settings

GiB = 1 << 30


def _py(filename: str, line: int, name: str) -> dict:
    return {"filename": filename, "line": line, "name": name}


#: What the caching allocator's own frames look like under stacks="all" (internal to every stack).
ALLOCATOR = [_py("??", 0, "torch::unwind::unwind()"), _py("??", 0, "torch::CapturedTraceback::gather(bool, bool, bool)"),
             _py("CUDACachingAllocator.cpp", 0, "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::"
                 "malloc(int, unsigned long, CUstream_st*)")]
#: A forward op called from the user's model (torch's Python frames, then the user's lines).
FORWARD = [*ALLOCATOR, _py("/env/lib/python3.11/site-packages/torch/nn/modules/linear.py", 125, "forward"),
           _py("/env/lib/python3.11/site-packages/torch/nn/modules/module.py", 1750, "_call_impl"),
           _py("/work/train/model.py", 54, "forward"), _py("/work/train/train.py", 120, "main")]
#: The user's line of :data:`FORWARD`, as ``veotrace sites`` names it.
FORWARD_SITE = "/work/train/model.py:54 forward"
#: A gradient made on the autograd engine's thread: no Python frame at all.
BACKWARD = [*ALLOCATOR, _py("??", 0, "at::_ops::mul_Tensor::call(at::Tensor const&, at::Tensor const&)"),
            _py("??", 0, "torch::autograd::generated::MulBackward0::apply(std::vector<at::Tensor>&&)"),
            _py("??", 0, "torch::autograd::Node::operator()(std::vector<at::Tensor>&&)"),
            _py("??", 0, "torch::autograd::Engine::evaluate_function(std::shared_ptr<torch::autograd::GraphTask>&)"),
            _py("??", 0, "torch::autograd::Engine::thread_main(std::shared_ptr<torch::autograd::GraphTask> const&)"),
            _py("??", 0, "torch::autograd::Engine::thread_init(int, std::shared_ptr<torch::autograd::ReadyQueue> "
                "const&, bool)"),
            _py("??", 0, "torch::autograd::python::PythonEngine::thread_init(int, std::shared_ptr<torch::autograd::"
                "ReadyQueue> const&, bool)"),
            _py("thread48.o", 0, "execute_native_thread_routine"), _py("??", 0, "clone")]
#: Weights, made by the user's loader.
LOADER = [*ALLOCATOR, _py("/work/train/load.py", 190, "allocate"), _py("/work/train/train.py", 80, "main")]
LOADER_SITE = "/work/train/load.py:190 allocate"
#: How ``veotrace sites`` must name the gradients of :data:`BACKWARD` (``attribution.stacks.BACKWARD_THREAD``;
#: written here again: the generator sits below the code it checks).
BACKWARD_THREAD = "backward pass (autograd engine thread)"


@dataclass
class Truth:
    """What a reader must say of the snapshot: ``held`` live bytes at the end by the site that made them,
    the program's own ``empty_cache()`` (``released_bytes``, ``released_segments``), the span of the trace,
    the reserved bytes before recording began (``reserved_before``) and at the end."""

    held: dict[str, int] = field(default_factory=dict)
    released_bytes: int = 0
    released_segments: int = 0
    span_s: float = 0.0
    reserved_before: int = 0
    reserved_end: int = 0
    peak_live: int = 0


class _Program:
    """A :class:`CachingAllocator` whose recorded entries carry the stack of the code that made them."""

    def __init__(self, device_memory: int = 80 * GiB) -> None:
        self.a = CachingAllocator(Settings(device_memory=device_memory))
        self.frames_of: dict[int, list] = {}  # block address -> the stack of its allocation

    def malloc(self, size: int, frames: list):
        n = len(self.a.trace)
        b = self.a.malloc(size)
        for e in self.a.trace[n:]:
            e["frames"] = list(frames)
        self.frames_of[b.addr] = frames
        return b

    def free(self, b) -> None:
        frames = self.frames_of.get(b.addr, [])
        n = len(self.a.trace)
        self.a.free_(b)
        for e in self.a.trace[n:]:
            e["frames"] = list(frames)

    def empty_cache(self) -> int:
        n = len(self.a.trace)
        self.a.empty_cache()
        for e in self.a.trace[n:]:
            e["frames"] = []
        return n

    def wait(self, seconds: float) -> None:
        self.a.t_us += int(seconds * 1e6)

    def snapshot(self) -> dict:
        snap = self.a.snapshot()
        for seg in snap["segments"]:
            for b in seg["blocks"]:
                if b["state"] == "active_allocated":
                    b["frames"] = list(self.frames_of.get(b["address"], []))
        return snap

    def reserved(self) -> int:
        return self.a.reserved


def _span(snap: dict) -> float:
    t = [e["time_us"] for e in snap["device_traces"][0] if "time_us" in e]
    return (max(t) - min(t)) / 1e6 if t else 0.0


def backward_thread(seed: int = 0, *, steps: int = 3, layers: int = 8) -> tuple[dict, Truth]:
    """Training steps: weights from the loader (live throughout), forward activations from the user's
    model, then the backward pass on the autograd engine's thread: one gradient per weight, kept live (the
    ``.grad`` of each weight) across steps, the activations freed. Truth: the bytes live at the end by site
    (``BACKWARD_THREAD``'s label for the gradients)."""
    rng = np.random.default_rng(seed)
    p = _Program()
    sizes = [int(rng.integers(4, 40)) * 2 * MiB for _ in range(layers)]
    weights = [p.malloc(s, LOADER) for s in sizes]
    p.a.recording = True
    grads: list = []
    for _ in range(steps):
        acts = [p.malloc(int(s * rng.uniform(0.5, 1.5)) // 512 * 512, FORWARD) for s in sizes]
        if not grads:
            grads = [p.malloc(s, BACKWARD) for s in sizes]  # made once, reused by later steps (.grad)
        tmp = [p.malloc(s, BACKWARD) for s in sizes[::2]]  # the engine's temporaries, freed at once
        for b in reversed(tmp + acts):
            p.free(b)
        p.wait(0.05)
    snap = p.snapshot()
    truth = Truth(held={LOADER_SITE: sum(b.size for b in weights), BACKWARD_THREAD: sum(b.size for b in grads)},
                  span_s=_span(snap), reserved_end=p.reserved())
    return snap, truth


def opening_empty_cache(seed: int = 0, *, warm_blocks: int = 120, steps: int = 60, step_s: float = 1.0,
                        layers: int = 6) -> tuple[dict, Truth]:
    """A program that calls ``torch.cuda.empty_cache()`` as recording starts: before it, a warm-up left
    ``warm_blocks`` large blocks of varied sizes cached and free, each segment apart (free bytes spread
    over many segments: fragmented); the call gives them back (the program's release, most of the
    cache). Then ``steps`` steps ``step_s`` apart on a working set of a few hundred MiB. Truth: the bytes
    and segments the program released, the reserved bytes before recording (the peak of the run)."""
    rng = np.random.default_rng(seed)
    p = _Program()
    weights = [p.malloc(int(rng.integers(2, 10)) * 2 * MiB, LOADER) for _ in range(4)]
    warm = [p.malloc(int(rng.integers(12, 160)) * 2 * MiB, FORWARD) for _ in range(warm_blocks)]
    for b in warm:
        p.free(b)
    truth = Truth(reserved_before=p.reserved())
    p.a.recording = True
    before = p.reserved()
    p.empty_cache()
    truth.released_bytes = before - p.reserved()
    truth.released_segments = sum(e["action"] == "segment_free" for e in p.a.trace)
    sizes = [int(rng.integers(2, 24)) * 2 * MiB for _ in range(layers)]
    for _ in range(steps):
        p.wait(step_s)
        acts = [p.malloc(s, FORWARD) for s in sizes]
        for b in reversed(acts):
            p.free(b)
    snap = p.snapshot()
    truth.held = {LOADER_SITE: sum(b.size for b in weights)}
    truth.span_s, truth.reserved_end = _span(snap), p.reserved()
    return snap, truth


def forward_pass(seed: int = 0, *, span_s: float = 0.3, layers: int = 24) -> tuple[dict, Truth]:
    """One forward pass over ``span_s`` seconds: layer k allocates its activations in a burst (7 us apart)
    from k + 1 size classes (so the size-class entropy rises through the pass), the previous layer's are
    freed. Truth: the span."""
    rng = np.random.default_rng(seed)
    p = _Program()
    classes = [int(2 ** rng.uniform(9, 26)) // 512 * 512 or 512 for _ in range(layers)]
    p.a.recording = True
    prev: list = []
    for k in range(layers):
        p.wait(span_s / layers)
        acts = [p.malloc(classes[int(rng.integers(0, k + 1))], FORWARD) for _ in range(40)]
        for b in reversed(prev):
            p.free(b)
        prev = acts
    snap = p.snapshot()
    return snap, Truth(span_s=_span(snap), reserved_end=p.reserved())


def oom_dump(seed: int = 0, *, device_memory: int = 12 * GiB) -> tuple[dict, Truth]:
    """The snapshot an OOM handler dumps with no history recorded: the loader's weights fill the device
    until a malloc fails; the trace holds only the ``snapshot`` entry PyTorch writes. Truth: the bytes the
    loader holds (every live block)."""
    rng = np.random.default_rng(seed)
    p = _Program(device_memory)
    held = []
    try:
        while True:
            held.append(p.malloc(int(rng.integers(8, 64)) * 2 * MiB, LOADER))
    except OutOfMemory:
        pass
    snap = p.snapshot()
    live = sum(b.size for b in held)
    snap["device_traces"] = [[{"action": "snapshot", "addr": 0, "size": live, "stream": 0}]]
    return snap, Truth(held={LOADER_SITE: live}, reserved_end=p.reserved(), peak_live=live)


def hidden_reserve(seed: int = 0, *, segments: int = 5, segment_bytes: int = 50 * MiB,
                   trace_live: int = 2100 * MiB) -> tuple[dict, Truth]:
    """A snapshot that contradicts itself: ``segments`` segments of ``segment_bytes`` at the end, and a
    trace with no segment event whose allocations (outside them) reach ``trace_live`` live bytes before
    they are freed. No allocator could have held them in the segments listed: the reserved bytes over
    the trace cannot be known. Truth: the trace's peak live bytes, the segments' reserved bytes."""
    rng = np.random.default_rng(seed)
    p = _Program()
    base = [p.malloc(segment_bytes, LOADER) for _ in range(segments)]
    for b in base[1:]:
        p.free(b)
    snap = p.snapshot()
    t = snap["device_traces"][0]
    addr, live, t_us = 0x7F80_0000_0000, [], 1_760_000_000_000_000
    total = 0
    while total < trace_live:
        size = int(rng.integers(8, 64)) * 2 * MiB
        t_us += 100
        t.append({"action": "alloc", "addr": addr, "size": size, "stream": 0, "time_us": t_us, "frames": list(FORWARD)})
        live.append((addr, size))
        addr += size
        total += size
    for a, s in reversed(live):
        for action in ("free_requested", "free_completed"):
            t_us += 100
            t.append({"action": action, "addr": a, "size": s, "stream": 0, "time_us": t_us, "frames": list(FORWARD)})
    return snap, Truth(reserved_end=segments * segment_bytes, peak_live=total, span_s=_span(snap))
