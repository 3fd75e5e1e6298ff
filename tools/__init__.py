"""The checkout's own tooling, run from the clone's root (`python -m tools.<name>`): not part of the
installed package (pyproject.toml's `packages.find` takes `pazo*` only)."""
