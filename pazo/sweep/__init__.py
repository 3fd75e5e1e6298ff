"""Sweeps over the paper's grids: `pazo-sweep <spec>` (`python -m pazo.sweep`).

`spec` reads a sweep spec and its grids within their bounds and enumerates the planned runs;
`checks` composes and validates every run's config before any starts and reads what earlier
launches left; `launchers` runs them (one after another, joblib, submitit); `selection` is the
private hyperparameter selection (`--selection private`), `child_runs` what a Ctrl-C does to the
runs started; `command` is the command line."""
