"""The run config: its schema (`schema.CampaignConfig`, one pydantic model, every key with its default), the
reader of older config files (`legacy`), dotted-key access (`dotted`), the portfolio section's own model
(`portfolio`) and the defaults table the CLI prints (`defaults_table`). Kept light: importing the package loads
nothing heavy, so `vevo --help` stays fast."""
