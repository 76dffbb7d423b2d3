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
