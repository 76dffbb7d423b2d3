"""PyTorch profiler traces: the Kineto chrome trace (``export_chrome_trace``, ``tensorboard_trace_handler``;
``*.pt.trace.json[.gz]``) and ``export_memory_timeline``'s raw export.

Owns: finding and checking the ``[memory]`` events in any size of trace (``scan``: a byte-level prefilter for
the memory events, an event-at-a-time decoder for the ops), their table and the ops that enclose them
(``trace``), and the memory timeline's rows (``timeline``). Schemas: ``veotrace.schemas.kineto``.
"""
