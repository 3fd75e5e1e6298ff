"""`python -m pazo.sweep <spec> [args]`, as `pazo-sweep`."""
import sys

from pazo.sweep.command import cli

sys.exit(cli())
