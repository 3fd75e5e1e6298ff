"""`python scripts/make_tables.py [args]`, as `pazo-report tables [args]` (pazo.report.tables)."""
if __name__ == "__main__":
    from pazo.report.tables import cli
    cli()
