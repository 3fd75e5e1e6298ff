"""`python scripts/benchmark_scaling.py [args]`, as `pazo-bench scaling [args]` (pazo.bench.scaling)."""
if __name__ == "__main__":
    from pazo.bench.scaling import cli
    cli()
