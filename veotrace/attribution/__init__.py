"""Who and when: the allocation sites and phases behind peaks, cached memory and stranded free space.

Owns the site rule (an allocation's site is its first stack frame outside PyTorch and Python
internals: ``stacks``), the attribution of a PyTorch snapshot's trace and final state to sites and
phases (``attribute``: live bytes by site at each device's peaks and at the end, the live blocks that
pin free space in segments, the phases from ``external_annotations``, and its result ``SitesResult``),
and the flat ``sites/1`` table (``tables``). Pure functions on the snapshot's plain data; reading
files is the run layer's (``runs/sites.py``, the ``sites`` command).
"""
