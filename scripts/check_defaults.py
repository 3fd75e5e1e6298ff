"""`python scripts/check_defaults.py [args]`, as `pazo-bench defaults [args]` (pazo.bench.defaults)."""
if __name__ == "__main__":
    from pazo.bench.defaults import cli
    cli()
