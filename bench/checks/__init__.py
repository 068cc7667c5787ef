"""Acceptance checks and the helpers they and the tests share (running as an ordinary user, the GPU check, the importers' full run)."""
