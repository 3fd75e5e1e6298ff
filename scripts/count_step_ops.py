"""`python scripts/count_step_ops.py [args]`, as `pazo-bench step-ops [args]` (pazo.bench.step_ops)."""
if __name__ == "__main__":
    from pazo.bench.step_ops import cli
    cli()
