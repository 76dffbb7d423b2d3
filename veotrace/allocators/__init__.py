"""Allocator models for ``veotrace simulate``: replay a recorded alloc/free sequence through policies.

This package owns the what-if side of memory analysis: parsing ``PYTORCH_CUDA_ALLOC_CONF`` strings and
a snapshot's ``allocator_settings`` (:mod:`conf`), a model of PyTorch's CUDA caching allocator whose
rules carry the names of ``c10/cuda/CUDACachingAllocator.cpp`` (:mod:`torch`), the reference policies
(``ideal``, ``bestfit``/``firstfit`` over one arena, exact-size ``reuse``, lifetime-``tiered`` pools;
the protocol they meet and the name -> factory registry in :mod:`policies`),
the compiled core of the torch model and the one decision of which core runs (:mod:`torchcore`,
``_torchcore.c``), the request builder that pairs any ``alloc_events/1`` source into alloc/free
requests batch by batch (:mod:`builder`, :mod:`requests`), streamed pass after pass for long logs
(:mod:`stream`), the replay driver that feeds them to a policy (:mod:`replay`), and the check that the torch model reproduces the device allocations a real
snapshot recorded (:mod:`validation`). Every policy reports what it did as an ``alloc_events/1`` stream
with model-chosen addresses; fragmentation over windows is computed from that stream by
:mod:`veotrace.frag`, not here. Pure code: no printing, no file reading.
"""

from __future__ import annotations

from veotrace.allocators.policies import POLICIES  # the names, from the one policy registry (policies.REGISTRY)

__all__ = ["POLICIES"]
