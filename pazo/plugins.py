"""Plugins: a user's own methods, data sets and models, in modules of their own package, registered
with the decorators pazo's own code uses (`register_method`, `register_dataset`, `register_model`).

A plugin module is named by the `pazo.plugins` entry-point group of an installed package (the
standard Python plugin mechanism: `[project.entry-points."pazo.plugins"] mine = "my_package.pazo"`)
or by the environment variable `PAZO_PLUGINS` (comma-separated module names, for a plain module on
the path; a sweep's subprocesses inherit it). Every entry point calls `load_plugins()` first,
before Hydra composes a config, so that the names the plugins register are choices like pazo's
own; it imports each module once per process. A plugin that fails to import is the user's mistake:
one line `pazo: error: plugin X (from ...): ...` and exit 2, before anything runs; a plugin whose
import exits (`sys.exit`, an argparse that reads pazo's command line) too, quoting the last line it
wrote to stderr."""
from __future__ import annotations

import importlib
import os
import sys
from importlib.metadata import entry_points

from pazo.errors import PazoExit

GROUP = "pazo.plugins"
ENVIRONMENT = "PAZO_PLUGINS"

#: module name -> where it was named ("entry point <name>" or the variable), in loading order
LOADED: dict[str, str] = {}
_DONE = False


class PluginError(ImportError):
    """A plugin module that could not be imported (or whose import raised)."""


def plugin_modules(environ=None) -> list[tuple[str, str, object]]:
    """(module, where it is named, loader) for every plugin: the entry points' first (sorted by
    name, so that every process registers in one order), then `PAZO_PLUGINS`'s, each module once."""
    environ = os.environ if environ is None else environ
    found: dict[str, tuple[str, object]] = {}
    for ep in sorted(entry_points(group=GROUP), key=lambda e: e.name):
        found.setdefault(ep.value, (f"entry point {ep.name}", ep.load))
    for name in (n.strip() for n in environ.get(ENVIRONMENT, "").split(",")):
        if name:
            found.setdefault(name, (ENVIRONMENT, lambda name=name: importlib.import_module(name)))
    return [(module, where, load) for module, (where, load) in found.items()]


def import_plugins(environ=None) -> list[str]:
    """Import every plugin not imported yet; the modules imported now. A failure is a PluginError
    that names the plugin, where it was named and what went wrong."""
    imported = []
    for module, where, load in plugin_modules(environ):
        if module in LOADED:
            continue
        _load(module, where, load)
        LOADED[module] = where
        imported.append(module)
    return imported


def _load(module: str, where: str, load) -> None:
    """Import one plugin, what it writes to stderr meanwhile held (`_HeldStderr`): a PluginError if
    its import raises or exits, of any class but pazo's own exit (a Ctrl-C before the work starts)."""
    held = sys.stderr = _HeldStderr(sys.stderr)
    try:
        load()
    except PazoExit:
        held.release()
        raise
    except (Exception, SystemExit) as err:   # anything its import raises (or exits with) is its fault
        said = held.release(show=not isinstance(err, SystemExit))
        raise PluginError(f"plugin {module} (from {where}): {_what_went_wrong(err, said)}") from err
    finally:
        if sys.stderr is held:
            sys.stderr = held.real
    held.release()


class _HeldStderr:
    """`sys.stderr` while a plugin imports: what it writes is held back until `release`, so that an
    import that exits (argparse's usage and error line, then sys.exit(2)) ends in pazo's one line
    alone; after it, writes pass through (a logging handler the import made keeps this object)."""

    def __init__(self, real):
        self.real, self._held = real, []

    def write(self, text: str) -> int:
        if self._held is None:
            return self.real.write(text)
        self._held.append(text)
        return len(text)

    def release(self, show: bool = True) -> str:
        """Write out what was held (`show`), pass writes through from now on; the last line held."""
        text, self._held = "".join(self._held or ()), None
        if show and text:
            self.real.write(text)
        return next((line.strip() for line in reversed(text.splitlines()) if line.strip()), "")

    def __getattr__(self, name: str):
        return getattr(self.real, name)


def _what_went_wrong(err: BaseException, said: str = "") -> str:
    """A plugin's failed import in a few words: its error and message on one line, or the exit its
    module called (a sys.exit at import ended every pazo command with that status and no word) and
    the last line it wrote to stderr before it."""
    if isinstance(err, SystemExit):
        return f"its import called sys.exit({err.code!r})" + (f" after writing {said!r}" if said else "")
    return f"{type(err).__name__}: {' '.join(str(err).split())}{_first_registration(err)}"


def _first_registration(err: Exception) -> str:
    """For a name registered twice (`pazo.registry.DuplicateNameError`, told by its `first_origin`):
    the plugin whose module registered it first, or pazo itself."""
    first = getattr(err, "first_origin", None)
    if first is None:
        return ""
    if first == "pazo" or first.startswith("pazo."):
        return " (the first is pazo's own: choose another name)"
    owner = next((f"plugin {module} (from {where})" for module, where in LOADED.items()
                  if first == module or first.startswith(module + ".")), None)
    return f" (the first is {owner}: rename one of them)" if owner else " (rename one of them)"


def load_plugins() -> None:
    """Every entry point's first call: import the plugins once per process; a plugin that fails is
    one `pazo: error:` line and exit 2."""
    global _DONE
    if _DONE:
        return
    try:
        import_plugins()
    except PluginError as err:
        print(f"pazo: error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    _DONE = True
