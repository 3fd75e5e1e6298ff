"""`python scripts/make_figures.py [args]`, as `pazo-report figures [args]` (pazo.report.figures)."""
if __name__ == "__main__":
    from pazo.report.figures import cli
    cli()
