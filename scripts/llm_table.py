"""`python scripts/llm_table.py [args]`, as `pazo-report llm-table [args]` (pazo.report.llm_table)."""
if __name__ == "__main__":
    from pazo.report.llm_table import cli
    cli()
