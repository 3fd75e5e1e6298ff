"""What the command lines share (`pazo-train`, `pazo-audit`): the user's mistakes that end a run
in one `pazo: error:` line, and the check of a command line's overrides before anything starts."""
from __future__ import annotations

import secrets

from omegaconf import OmegaConf

from pazo import CONFIG_DIR
from pazo.errors import ConfigError
from pazo.privacy.accountants import BudgetError
from pazo.registry import UnknownNameError

#: a user's mistake, not a fault: one line and exit 2 (DataMissingError is a FileNotFoundError)
USER_ERRORS = (ConfigError, BudgetError, UnknownNameError, FileNotFoundError)


def register_resolvers() -> None:
    """The interpolations pazo's configs use (`${pazo_unique:}` in `hydra.run.dir`: a short random
    token per process, so that two runs started in the same second get two directories). Every
    entry point that composes configs/ imports this module, which calls it once."""
    OmegaConf.register_new_resolver("pazo_unique", lambda: secrets.token_hex(3), use_cache=True, replace=True)
    OmegaConf.register_new_resolver("pazo_job_dir", job_dir, replace=True)


def job_dir(override_dirname: str, overrides, num) -> str:
    """A multirun job's directory (`${pazo_job_dir:...}` in `hydra.sweep.subdir`): its overrides
    but the seed, which goes to config.yaml only (the seed_secret assumption); a job given a seed
    also gets its number, `job=<n>`, so that jobs that differ only in their seed do not share one."""
    seeded = any(str(o).split("=", 1)[0].lstrip("+~") == "seed" for o in overrides)
    if not seeded:
        return override_dirname
    return f"{override_dirname},job={num}" if override_dirname else f"job={num}"


register_resolvers()


def check_overrides(argv: list[str], config_name: str = "config", check=None) -> str | None:
    """Compose the config (`config_name`) with the command line's overrides as Hydra will and check
    its values (`pazo.validate.validate_config`: every key's type and range, then what spans
    groups): the first line of the error (an unknown key, a value of the wrong type or out of range,
    a missing config group option), or None. `check(cfg)`: the entry point's own checks (e.g. the
    audit's settings), raising ConfigError. Multiruns and Hydra's own flags are left to Hydra (each
    job of a multirun is checked when it starts)."""
    if any(a.startswith("-") for a in argv):
        return None
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from pazo.validate import validate_config  # (also registers the method schemas Hydra composes with)

    overrides = [a for a in argv if not a.startswith("hydra.")]
    try:
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
            cfg = compose(config_name=config_name, overrides=overrides)
        validate_config(cfg)
        if check is not None:
            check(cfg)
    except ConfigError as err:
        return str(err)
    except (HydraException, OmegaConfBaseException, ValueError) as err:
        lines = [line.strip() for e in (err, err.__cause__) if e is not None for line in str(e).splitlines()]
        lines = [line for line in lines if line and not line.startswith(("full_key", "object_type", "To append"))]
        if len(lines) > 2 and lines[1].startswith("Available options"):  # a config group's choices
            options = [o for o in lines[2:] if o.isidentifier() and not o.endswith("_schema")]
            return f"{lines[0]}; choices: {', '.join(options)}"
        return "; ".join(dict.fromkeys(lines[:2])) or type(err).__name__
    return None
