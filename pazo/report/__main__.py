"""`python -m pazo.report <name> [args]`, as `pazo-report`."""
import sys

from pazo.report import main

sys.exit(main())
