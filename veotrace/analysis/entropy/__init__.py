"""Size-class entropy over time: per-window class counts (mergeable), the series per group, the trend and its notes."""
