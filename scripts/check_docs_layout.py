"""`python scripts/check_docs_layout.py [args]`, as `pazo-report docs-layout [args]` (pazo.report.docs_layout)."""
if __name__ == "__main__":
    from pazo.report.docs_layout import cli
    cli()
