"""Other frameworks driving vevo's parts: veRL's advantage estimators, reward function and reward manager
(``verl_plugin``, ``verl_reward``; docs/VERL.md)."""
