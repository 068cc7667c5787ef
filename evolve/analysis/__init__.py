"""Reading finished or running campaigns: curves (`curves`), comparisons of arms (`arms`), the time account
(`account`), per-member portfolio stats (`portfolio_stats`), program views and diffs (`program_view`), verdicts
(`verdict`) and trace export (`traces`). Reads the archive; never writes a run."""
