"""`python scripts/benchmark_calibration.py [args]`, as `pazo-bench calibration [args]` (pazo.bench.calibration)."""
if __name__ == "__main__":
    from pazo.bench.calibration import cli
    cli()
