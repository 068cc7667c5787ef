"""Minimal stand-in so OpenEvolve evaluators import without the openevolve package installed."""
