"""Cost measurements: each prints ratios against a baseline measured in the same run (never asserted in tests)."""
