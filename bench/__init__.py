"""Measurements, studies and acceptance checks, by kind: perf/, studies/, checks/ (docs/ARCHITECTURE.md)."""
