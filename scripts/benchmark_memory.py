"""`python scripts/benchmark_memory.py [args]`, as `pazo-bench memory [args]` (pazo.bench.memory)."""
if __name__ == "__main__":
    from pazo.bench.memory import cli
    cli()
