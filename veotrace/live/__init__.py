"""Live layer (issue 29): follow a growing alloc/free log, or a folder of rotated logs, and emit each window
of an analysis as it completes.

It owns: the tail through rotation (``tail``: new files, rename-and-create, copytruncate, compressed
copies, partial lines, deleted files), the data contract of what a follower prints and keeps
(``contract``: the JSON Lines records and the checkpoint file, each with a version), the windows
completed as the log grows (``windows``, over the analyses' own mergeable partials) and the loop that
polls, emits, checkpoints and stops (``follow``). Readers parse the lines (``sources.logs.lines``); the
run layer (``runs.follow``) joins them for the commands.
"""
