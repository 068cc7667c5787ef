"""Training the proposer: advantage estimators (``estimators``, the algorithm registry; ``algorithms``), reward
shaping (``rewards``), which archive groups a step learns from (``replay_buffer``), the PPO policy update
(``trainer``), LoRA (``lora``) and CoVRL (``covrl``, ``covrl_step``, ``references``)."""
