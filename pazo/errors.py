"""Errors that mean "the user's input is wrong": reported as one message, never a traceback; and the
small checks that raise them (the config schemas', `pazo/config_schema.py` and `pazo/methods/`)."""

import difflib
import math


class ConfigError(ValueError):
    pass


class UserCodeError(ConfigError):
    """Code of the user's own (a library user's `model`, `loss_fn` or `data`; a plugin's method)
    failed, or gave what pazo cannot use: one line that names the object (and the step), the
    original error chained as its cause for debugging."""


class PazoExit(SystemExit):
    """An exit of pazo's own (a Ctrl-C before the work starts, `pazo.commands.interrupts`), told
    apart by its class from a `sys.exit` in a user's code, which `pazo.plugins` turns into one line."""


class DataMissingError(FileNotFoundError):
    """A data set or weights file is not where we looked: the message says what, where and how to
    get it."""


class DataCorruptError(DataMissingError):
    """A data file is there but cannot be used (truncated, garbage, another format): the message
    names the file, says what is wrong and how to get it again. A user's problem like a missing
    file (one line, exit 2), and a kind of one: the data set as it should be is not there."""


def require(ok: bool, message: str) -> None:
    """Raise the one-line user error `message` unless `ok`."""
    if not ok:
        raise ConfigError(message)


def positive(value, what: str) -> None:
    require(isinstance(value, (int, float)) and math.isfinite(value) and value > 0,
            f"{what} must be a positive number, got {value!r}")


def at_least_one(value, what: str) -> None:
    """A count or size: an integer >= 1 (true and false are not counts)."""
    require(isinstance(value, int) and not isinstance(value, bool) and value >= 1,
            f"{what} must be an integer >= 1, got {value!r}")


def one_of(value, choices, what: str) -> None:
    require(value in choices, unknown_choice(what, value, choices))


def close_match(name: str, known) -> str | None:
    """The known name nearest to `name` as difflib measures it (at a ratio of 0.6 at least), or None."""
    return next(iter(difflib.get_close_matches(name, [str(k) for k in known], n=1, cutoff=0.6)), None)


def unknown_key(key: str, known, aliases: dict[str, str] | None = None, where: str | None = None) -> str:
    """The message for a key that is not there: the close match (a paper's symbol in `aliases`,
    e.g. DP-AggZO's K for `q`, else difflib's nearest name) and the keys there are."""
    parent, _, name = key.rpartition(".")
    known = sorted(str(k) for k in known)
    match = (aliases or {}).get(name) or close_match(name, known)
    hint = f"; did you mean {parent + '.' if parent else ''}{match}?" if match else ""
    return f"unknown key {key}{hint} ({where or parent or 'the top level'} has: {', '.join(known)})"


def unknown_option(group: str, option: str, options) -> str:
    """The message for a config group's option that is not one (`method=pazom`), as the command line
    names it: the close match and the options there are, in one line."""
    options = sorted(str(o) for o in options)
    match = close_match(option, options)
    hint = f"; did you mean {group}={match}?" if match else ""
    return f"unknown {group}={option}{hint} (choices: {', '.join(options)})"


def unknown_choice(what: str, value, choices) -> str:
    """The message for a name that is not among `choices` (a part, a sweep, an engine): the close
    match and the choices, in one line."""
    choices = sorted(str(c) for c in choices)
    match = close_match(str(value), choices)
    hint = f"; did you mean {match!r}?" if match else ""
    return f"unknown {what} {value!r}{hint} (choices: {', '.join(choices)})"
