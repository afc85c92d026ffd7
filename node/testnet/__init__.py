"""`gavel testnet`: many nodes on one machine, some cheating on purpose, and a report.

Modules: `plan` (who plays what, which jobs), `launcher` (the network in one trio
process or as OS processes), `ledger` (the contract's events made into records),
`truth` (the honest result of every job, recomputed here), `report` (report.json and
its summary), `plots` and `html` (report.html), `display` (live progress), `sweep`
(the catch rate against the sampling arithmetic), `stats` (confidence intervals).
"""
