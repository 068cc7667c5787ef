"""The search loop: one campaign (`campaign`) drives islands (`islands`, `population`), the proposal pipeline
(`pipeline`), the program cache (`program_cache`), stop rules (`budget`), health checks (`health`) and the one
seam the training schedule plugs into (`hooks.TrainerHook`)."""
