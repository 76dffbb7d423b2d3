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

# coherence (collapse signs of a long video generation, per frame)
COHERENCE_ID_MIN = 0.65  # id drift: tracker cross-frame ID match rate below this
COHERENCE_FLOW_MAX_PX = 8.7  # flow jump: mean inter-frame flow displacement above this
COHERENCE_ENTROPY_MAX_BITS = 2.95  # semantic entropy jump: CLIP alignment entropy above this
COHERENCE_SCORE_MIN = 0.05  # score collapse: coherence score below this ...
COHERENCE_SCORE_DROP = 5.0  # ... or at least this many times lower than before a one-frame drop
COHERENCE_RULE = "any"  # "any", "all", or a comma-separated list of signs that must all fire
COHERENCE_PERSIST = 3  # the rule must hold this many consecutive frames for an onset
