"""`python scripts/run_docs_commands.py [args]`, as `pazo-report docs-run [args]` (pazo.report.docs_run)."""
if __name__ == "__main__":
    from pazo.report.docs_run import cli
    cli()
