"""`python scripts/benchmark_release_paths.py [args]`, as `pazo-bench release [args]` (pazo.bench.release_paths)."""
if __name__ == "__main__":
    from pazo.bench.release_paths import cli
    cli()
