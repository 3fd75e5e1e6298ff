"""`python -m pazo.audit [overrides]`, as `pazo-audit`."""
from pazo.audit.command import cli

cli()
