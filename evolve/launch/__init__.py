"""Starting and resuming runs: one campaign or one per seed (`runner`), portfolio members from the config
(`members`), and loading a run's trained policy (`policy`)."""
