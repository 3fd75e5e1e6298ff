"""How pazo writes and reads its files: regular files only (`file_kinds`), the run directory's
checks, lock and whole-or-nothing writes (`rundir`), and cache files used only once checked against
their key and content (`cache_files`). What a computation may leave is the release gate's
(`pazo.run.gate`), which writes through these."""
