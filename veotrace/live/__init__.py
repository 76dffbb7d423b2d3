"""Live layer (issue 29): follow a growing alloc/free log, a folder of rotated logs, or a folder of PyTorch
snapshot pieces, and emit each window of an analysis as it completes.

It owns: the tail through rotation (``tail``: new files, rename-and-create, copytruncate, compressed
copies, partial lines, deleted files, snapshot pieces renamed into place), the data contract of what a follower prints and keeps
(``contract``: the JSON Lines records and the checkpoint file, each with a version), the open windows
of each analysis over its own mergeable partials (``windows``: entropy, which the gate judges too;
``bursts``; ``fragmentation``: the offline replay fed as the log grows, its allocator state
checkpointed), the loop that polls, emits and stops (``follow``), and the helper a PyTorch job imports
to be followed (``torch_dump``: a snapshot piece per dump). Readers parse
the lines (``sources.logs.lines``); the run layer (``runs.follow``, ``runs.follow_gate``) joins them for
the commands.
"""
