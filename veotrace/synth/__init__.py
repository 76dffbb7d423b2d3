"""Seeded synthetic data generators that return (data, ground truth)."""
