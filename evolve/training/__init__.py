"""Training the proposer: inside a campaign (`campaign.CampaignTrainer`, its CoVRL variant `covrl`, fixed probes
`probe`) and standalone (`study`: `vevo train` / `vevo eval`; `traces`: training from exported traces); `setup`
builds a trainer from the run config. Plugs into the search through `evolve.search.hooks` only."""
