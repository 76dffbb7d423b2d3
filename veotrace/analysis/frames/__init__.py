"""Per-frame analyses of a video generation: address-jump / flow-error correlation and coherence collapse onset."""
