"""Pure choice rules the search applies and the run config names: parent selection (`selection`), where proposals
start from (`strategies`: evolve, iid, topk) and how a portfolio shares work among its members (`portfolio`)."""
