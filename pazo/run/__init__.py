"""One training run, from its launch to what it releases: `pazo-train` and the audit start here.

`launch` accepts a launch into its run directory (`attempts`: what earlier attempts released,
`releases`), opens the records and assembles the run (`build`: streams, data, model, warm start
(`warm_start`), privacy plan, engine and method); `loop` trains it (`progress`, `checkpoint`,
`distributed`); every file it leaves goes through the release gate (`gate`), its rows through
`recorder` to the outlets (`outlets`, `loggers`, `metrics_file`), its end through `summary`, its
weights through `weights`. Before any of it, `cli` and `validate` check the command line and the
config, `typed` types it once, and `fingerprint` and `digests` key the secret streams. Afterwards
`loaded` reads a finished run back (`pazo.load_run`, `hf_export`) and `results` reads many into
tables."""
