"""L2 per kernel: change points across launches, the per-kernel picture, and the rule presets that annotate breaks."""
