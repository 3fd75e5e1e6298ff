"""`python scripts/benchmark_engines.py [args]`, as `pazo-bench engines [args]` (pazo.bench.engines)."""
if __name__ == "__main__":
    from pazo.bench.engines import cli
    cli()
