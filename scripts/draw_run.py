"""`python scripts/draw_run.py [args]`, as `pazo-report run [args]` (pazo.report.run_figure)."""
if __name__ == "__main__":
    from pazo.report.run_figure import cli
    cli()
