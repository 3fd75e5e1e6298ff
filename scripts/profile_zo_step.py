"""`python scripts/profile_zo_step.py [args]`, as `pazo-bench profile [args]` (pazo.bench.profile_step)."""
if __name__ == "__main__":
    from pazo.bench.profile_step import cli
    cli()
