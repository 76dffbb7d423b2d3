"""Analysis defaults, in a module that imports nothing, so the CLI can show them without numpy."""

# entropy
ENTROPY_WINDOW_S = 300.0
ENTROPY_OPS = ("alloc",)
ENTROPY_MIN_CLASS = 2  # ceil(log2(4 KiB / 1 KiB))
ENTROPY_MAX_CLASS = 12  # ceil(log2(4 MiB / 1 KiB))

# bursts
BURSTS_GAP_MS = 5.0  # a burst continues while consecutive events are closer than this
BURSTS_MIN_EVENTS = 2  # fewer events than this (a singleton) is not a burst
BURSTS_OPS = ("alloc",)
