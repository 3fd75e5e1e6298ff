"""`python -m tools.docs <name> [args]`."""
import sys

from tools.docs import main

sys.exit(main())
