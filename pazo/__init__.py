"""pazo: differentially private zeroth-order optimisation with public data."""
from pathlib import Path

#: Hydra's config directory, `configs/` at the repository root beside this package. Entry points
#: (`pazo-train`, `python -m pazo.train`) find it from here whatever the working directory, so pazo
#: is installed from a clone in editable mode (`pip install -e .`); a wheel does not carry it.
CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"
#: The repository root (the clone pazo is installed from in editable mode): where `outputs/` and
#: `scripts/results/` are by default, whatever the working directory.
REPO_ROOT = CONFIG_DIR.parent


def __getattr__(name: str):
    """`pazo.load_run` (`pazo.run.loaded.load_run`), imported when first used: `import pazo` stays light
    (entry points import it in their first milliseconds, before torch)."""
    if name == "load_run":   # (by name: the package's root imports nothing of its layers, `lint-imports`)
        import importlib

        return importlib.import_module("pazo.run.loaded").load_run
    raise AttributeError(f"module 'pazo' has no attribute {name!r}")
