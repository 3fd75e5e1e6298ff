"""`python scripts/benchmark_methods.py [args]`, as `pazo-bench methods [args]` (pazo.bench.methods)."""
if __name__ == "__main__":
    from pazo.bench.methods import cli
    cli()
