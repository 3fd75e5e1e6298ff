"""The documentation's own tooling, run from the clone's root: `python -m tools.docs <name> [args]`
(the Makefile's `make docs`, `make docs-pages` and `make docs-run` are the usual way in). It builds
and checks pazo's documentation, so it stays in the checkout and is not installed with the package;
its pages are generated from the installed package's code, configs/ and scripts/results/."""
from __future__ import annotations

#: name -> (module, one line for `python -m tools.docs --help`)
COMMANDS = {
    "pages": ("tools.docs.pages", "the documentation's generated pages (reference, results) under docs/"),
    "run": ("tools.docs.run", "run every command shown in README.md and docs/, from outside the checkout"),
    "layout": ("tools.docs.layout", "no table or code block of the built site is cut off (Chromium)"),
}


def main(argv: list[str] | None = None) -> int:
    """`python -m tools.docs <name> [args]`."""
    from pazo.commands.start import dispatch
    return dispatch("python -m tools.docs", "the documentation's tooling", COMMANDS, argv)
