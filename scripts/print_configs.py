"""`python scripts/print_configs.py [parts]`, as `pazo-report configs [parts]` (pazo.report.docs_configs)."""
if __name__ == "__main__":
    from pazo.report.docs_configs import cli
    cli()
