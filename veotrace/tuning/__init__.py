"""Which PYTORCH_CUDA_ALLOC_CONF to run: the settings searched, each replayed through the torch model, the
Pareto front and one recommendation (``veotrace tune``).

Owns the search space (``space``: the knobs, the default grid, ``--try``/``--space``, the combinations
known to misbehave), the evaluation of one candidate on shared requests with pruning (``evaluate``),
and the search itself with its front, its recommendation rule and the robustness check (``search``).
Pure functions on decoded requests (``allocators.requests.Requests``); reading files, validation
against the trace and running candidates in parallel are the run layer's (``runs/tune.py``).
"""
