"""`python scripts/make_docs_pages.py [args]`, as `pazo-report docs [args]` (pazo.report.docs_pages)."""
if __name__ == "__main__":
    from pazo.report.docs_pages import cli
    cli()
