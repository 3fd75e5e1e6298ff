"""`python -m pazo.privacy sigma|epsilon|steps [options]`, as `pazo-privacy`."""
from pazo.privacy.command import cli

cli()
