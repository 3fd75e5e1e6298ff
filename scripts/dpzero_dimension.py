"""`python scripts/dpzero_dimension.py [args]`, as `pazo-bench dimension [args]` (pazo.bench.dimension)."""
if __name__ == "__main__":
    from pazo.bench.dimension import cli
    cli()
