"""Studies that write docs/results/: each states its command, seeds and plan; rerunnable by anyone."""
