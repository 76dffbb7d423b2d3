"""Every default and bound of veotrace in one place, in a module that imports nothing (the CLI shows them without numpy).

Analyses, the run layer, the CLI help and the report read their defaults here; none spells one again.
"""

# entropy
ENTROPY_WINDOW_S = 300.0
ENTROPY_OPS = ("alloc",)
ENTROPY_MIN_CLASS = 2  # ceil(log2(4 KiB / 1 KiB))
ENTROPY_MAX_CLASS = 12  # ceil(log2(4 MiB / 1 KiB))

# bursts
BURSTS_GAP_MS = 5.0  # a burst continues while consecutive events are closer than this
BURSTS_MIN_EVENTS = 2  # fewer events than this (a singleton) is not a burst
BURSTS_OPS = ("alloc",)

# change points (analysis/changepoints.py) and l2-breakpoints
CHANGEPOINT_MIN_SIZE = 5  # fewest launches in a regime (and so between two breaks)
# Multiplier of the BIC penalty 2 * sigma^2 * ln(n). 1.5 gives 3 * sigma^2 * ln(n), the per-break term of
# the modified BIC (Zhang & Siegmund 2007), which plain BIC (1.0) undercuts on short series.
CHANGEPOINT_PENALTY_SCALE = 1.5
L2_METRIC = "l2_miss_rate.pct"  # 100 - lts__t_sector_hit_rate.pct
L2_RULES = ("l2_throughput_low", "bytes_per_request_drop", "read_sector_slope_rise")
L2_THROUGHPUT_LOW_PCT = 65.0  # L2 throughput (% of peak) below this after a break
L2_BYTES_PER_REQUEST_FROM = 128.0  # bytes per L2 request before the break at least this ...
L2_BYTES_PER_REQUEST_TO = 32.0  # ... and after it at most this
L2_READ_SLOPE_RISE_PCT = 200.0  # read sectors per launch rising by at least this much (%)
# Smallest jump reported as a breakpoint, next to the statistical penalty (a 13.08% -> 13.38% shift at
# z = 3.3 is real but no engineer acts on it): 1 percentage point for metrics in %, else 5% of the level before.
L2_MIN_JUMP_POINTS = 1.0
L2_MIN_JUMP_RELATIVE_PCT = 5.0
L2_METRIC_FALLBACKS = ("l2_miss_rate.pct", "lts__throughput.avg.pct_of_peak_sustained_elapsed")  # default metric, in order
L2_CHANGEPOINT_LAUNCHES_HINT = 20  # the --launch-count suggested when a kernel has too few launches

# coherence (collapse signs of a long video generation, per frame)
COHERENCE_ID_MIN = 0.65  # id drift: tracker cross-frame ID match rate below this
COHERENCE_FLOW_MAX_PX = 8.7  # flow jump: mean inter-frame flow displacement above this
COHERENCE_ENTROPY_MAX_BITS = 2.95  # semantic entropy jump: CLIP alignment entropy above this
COHERENCE_SCORE_MIN = 0.05  # score collapse: coherence score below this ...
COHERENCE_SCORE_DROP = 5.0  # ... or at least this many times lower than before a one-frame drop
COHERENCE_RULE = "any"  # "any", "all", or a comma-separated list of signs that must all fire
COHERENCE_PERSIST = 3  # the rule must hold this many consecutive frames for an onset

# correlate (address jumps vs optical-flow end-point error)
CORRELATE_ALIGN = "into"  # per-frame EPE[j] goes with the transition j-1 -> j
CORRELATE_ALIGNS = ("into", "from")
CORRELATE_REDUCE = "mean"  # how (m, H, W) EPE maps become one value per frame
CORRELATE_REDUCES = ("mean", "median", "p95")
CORRELATE_TENSORS = "mean"  # how k tensors per frame become one jump
CORRELATE_TENSOR_REDUCES = ("mean", "max")
CORRELATE_RESAMPLES = 2000  # bootstrap resamples and permutations
MAX_RESAMPLES = 100_000  # largest --resamples of correlate and gate (their index arrays grow with it)
CORRELATE_SEED = 0
CORRELATE_BLOCK_LEN = 0  # 0 = automatic, about n ** (1/3)
CORRELATE_MAX_LAG = 0
CORRELATE_CONFIDENCE = 0.95

# gate (veotrace gate: a run against a saved baseline; README "CI gate" justifies each value)
GATE_MAX_INCREASE = "0.05"  # bits (or "N%" of the baseline mean): ~1.5% of log2(11), the max entropy
GATE_MAX_SLOPE_INCREASE = 0.002  # bits/hour: 0.048 bits more per day of running than the baseline
GATE_ALPHA = 0.05  # one-sided significance level of every check
GATE_RESAMPLES = 2000  # moving-block bootstrap resamples (history: E-Divisive permutations, at most 999)
GATE_SEED = 0
GATE_BLOCK_LEN = 0  # 0 = Politis & White (2004) automatic block length
GATE_LENGTH_TOLERANCE = 0.10  # window-by-window check only when the runs' lengths differ by at most 10%
GATE_MIN_WINDOWS = 20  # fewest non-empty windows in the run and the baseline
GATE_MIN_HISTORY = 3  # fewest baselines in a --history folder

# fragmentation (veotrace/frag) and banks
FRAGMENTATION_WINDOW_S = 300.0  # time windows; without timestamps, windows of FRAGMENTATION_WINDOW_EVENTS events
FRAGMENTATION_WINDOW_EVENTS = 1000
FRAGMENTATION_THRESHOLD = 0.65  # TF BFC / XProf: fragmented when the largest free block is under 65% of free bytes
FRAGMENTATION_MAX_GAP_BYTES = 2 << 20  # without segments, gaps under 2 MiB are free space inside one range
FRAGMENTATION_ZONE_BYTES = 2 << 20  # hot zones: 2 MiB, the large-page / large-segment granularity
FRAGMENTATION_BINS = ((8 << 10, 32 << 10), (64 << 10, 128 << 10), (256 << 10, None))  # [lo, hi] bytes; None = open
# Rows of a replay's window table (each device's windows from its first event to its last, empty ones
# included; for simulate, per policy), past which the replay is refused: a row and its bins take ~2.5 KB
# through the JSON output, so 200,000 rows (~30 s of windows x devices) stay near 1 GiB.
FRAGMENTATION_MAX_WINDOW_ROWS = 200_000
# categories (veotrace/analysis/categories.py): export_memory_timeline's categories over time, windowed as
# fragmentation's (a profiled run spans seconds, so a short span chooses its window from the data, as everywhere)
CATEGORIES_WINDOW_S = FRAGMENTATION_WINDOW_S
CATEGORIES_MAX_WINDOWS = 200_000  # windows of a --window past which it is refused (a row each in every output)
BANKS_COUNT = 32
BANKS_BANK_BYTES = 4
BANKS_WARP = 32
BANKS_MAX_OPTION = 1 << 16  # largest --warp, --banks, --bank-bytes, --elem-bytes (real: 32, 32, 4-8, 1-16)

# simulate (veotrace/allocators)
SIMULATE_MAX_UNKNOWN_FREES = 0.05  # share of frees naming no live allocation (ignored, counted) before refusing
SIMULATE_WINDOW_S = FRAGMENTATION_WINDOW_S  # each policy's fragmentation over time, windowed as fragmentation's
# ... wider with several devices, so that devices x windows (the rows of each policy's window table, each the
# state of one device at a window's end) stays under this: 50 windows for 40 devices, 2 for 1,024
SIMULATE_AUTO_WINDOW_ROWS = 2000
SIMULATE_HOLD_REQUESTS = 1 << 20  # a log of up to this many requests (64 B each: 64 MiB) is held between passes, longer ones read again

# replays (fragmentation, simulate): the largest block accepted, so that their int64 sums stay exact
MAX_BLOCK_BYTES = 1 << 44  # 16 TiB; 2**19 such blocks live at once still sum below 2**63
# Distinct devices a replay accepts (fragmentation, simulate, the report's sections): each device has an
# allocator state of its own, replayed apart (about 1 ms each per pass), so more is refused with one Error.
# A node has at most 16 GPUs; a log that merges every rank of a job may have a few hundred.
MAX_DEVICES = 1024
PLOT_MAX_DEVICES = 8  # lines drawn per series in the fragmentation and simulate figures (the largest devices)
TABLE_DEVICE_COLUMNS = 8  # simulate's peak per device: a column per device up to this many, else a row per device (--rows)

# durations of every option (--window, --step, --gap, --at, --segments, --tiers): whole nanoseconds in int64
MIN_DURATION_NS = 1  # timestamps are integer nanoseconds
MAX_DURATION_NS = (1 << 63) - 1  # about 292 years

# the HTML report (veotrace report)
REPORT_MAX_ROWS = 30  # rows of a section's key table shown before "first N of M rows"
DIAGNOSE_HOLD_BYTES = 2 << 30  # alloc/free events diagnose keeps from its description of the inputs for their analyses
REPORT_MAX_LAG = 3  # lags its correlate section draws, when the series is long enough (10x)
REPORT_POLICIES = ("torch", "bestfit", "ideal")  # its simulate section (all seven take several times longer)

# the first answer: when tune's best setting is a gain, and when diagnose's trend and burst findings can matter
# A setting beats the settings in use only when it lowers the objective by at least the larger of: this share of
# the baseline's value and, for bytes, one large segment (PyTorch's kLargeBuffer, 20 MiB), for counts, one. Under
# it the headline is "keep the settings in use" and the best setting is a side note with its numbers (smaller
# differences are within what the model does not know: the CUDA context, other processes).
TUNE_MIN_GAIN_SHARE = 0.01
TUNE_MIN_GAIN_BYTES = 20 << 20
# A trend (entropy) or burst finding is ranked only over a run at least this long, with at least as many windows
# holding events (a trend) or bursts: a shorter trace is one pass or a few steps, whose shape within is what such a
# pass looks like, not a drift a long job would feel. Else it is a note.
FINDING_MIN_SPAN_S = 60.0
FINDING_MIN_WINDOWS = 10
FINDING_MIN_BURSTS = 20

# sites
SITES_DEPTH = 1  # user frames that name an allocation site (--site-depth)
SITES_TOP = 10  # sites shown per table in the terminal (JSON and CSV keep every one)

# snapshots (sources/snapshots/large.py)
# Snapshot pickles at least this large on disk are streamed in two passes in flat memory instead of loaded whole
# (VEOTRACE_SNAPSHOT_STREAM_BYTES overrides it; the whole-file bound then does not apply, per-value bounds do).
SNAPSHOT_STREAM_BYTES = 64 << 20

# diff (two runs side by side); its noise tests reuse the gate's bootstrap (GATE_RESAMPLES, GATE_SEED, GATE_BLOCK_LEN)
DIFF_ALPHA = 0.01  # two-sided: a change is beyond run-to-run noise when its 99% bootstrap interval excludes 0 (comparison.deltas says why)
DIFF_MIN_WINDOWS = 8  # fewest non-empty windows on each side for a noise test (fewer: the change alone, untested)
DIFF_TOP_CLASSES = 3  # size classes listed as the ones that moved most
DIFF_TOP_SITES = 10  # sites per device shown in the terminal and markdown (JSON keeps every one)
DIFF_ALIGNS = ("time", "step", "events")  # --align: time since start, record_function steps, events
DIFF_ALIGN = "time"

# following a growing log (--follow; veotrace/live)
FOLLOW_POLL_S = 0.5  # seconds between two looks at the followed files (--poll)

# the MCP server (veotrace mcp; veotrace/mcp)
MCP_TIMEOUT_S = 120.0  # a tool call still running after this many seconds is stopped (--timeout); its worker is replaced
MCP_ROW_LIMIT = 10  # rows of each list a tool result shows unless asked for more (row_limit, row_offset, full)
MCP_MAX_CHARS = 20_000  # a cut result longer than this as JSON shows fewer rows per list (an assistant's reading budget)
MCP_FOLDER_ENTRIES = 100_000  # entries of a folder argument checked for links leading out of the roots (more: refused)
MCP_CACHE_BYTES = 256 << 20  # results kept for paging, at most this much of their JSON (the oldest go first)
MCP_READY_S = 120.0  # longest wait for a fresh worker to import what the commands need, or to take a call
MCP_WORKER_RSS_BYTES = 4 << 30  # a worker holding more than this after a call is replaced (its heap is not given back)
