"""`python scripts/benchmark_threads.py [args]`, as `pazo-bench threads [args]` (pazo.bench.threads)."""
if __name__ == "__main__":
    from pazo.bench.threads import cli
    cli()
