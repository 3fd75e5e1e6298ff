"""`python scripts/print_configs.py [parts]`, as `pazo-report configs [parts]` (pazo.report.config_reference)."""
if __name__ == "__main__":
    from pazo.report.config_reference import cli
    cli()
