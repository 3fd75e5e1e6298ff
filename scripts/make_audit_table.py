"""`python scripts/make_audit_table.py [args]`, as `pazo-report audit-table [args]` (pazo.report.audit_table)."""
if __name__ == "__main__":
    from pazo.report.audit_table import cli
    cli()
