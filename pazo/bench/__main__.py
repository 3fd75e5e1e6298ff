"""`python -m pazo.bench <name> [args]`, as `pazo-bench`."""
import sys

from pazo.bench import main

sys.exit(main())
