"""Name -> builder registries, so that configs pick components by name and a typo lists the choices."""
from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from pazo.errors import unknown_choice

T = TypeVar("T")


class UnknownNameError(ValueError):
    pass


class DuplicateNameError(ValueError):
    """A name registered a second time: says both registering modules (`first_origin` and
    `second_origin`), so that a plugin loader can name the plugins they belong to."""

    def __init__(self, kind: str, name: str, first_origin: str, second_origin: str):
        super().__init__(f"{kind} {name!r} is registered twice: first by module {first_origin}, "
                         f"again by module {second_origin}")
        self.first_origin, self.second_origin = first_origin, second_origin


class Registry(Generic[T]):
    def __init__(self, kind: str):
        self.kind, self._items, self._origins = kind, {}, {}

    def register(self, name: str, origin: str | None = None) -> Callable[[T], T]:
        """Decorator: add `item` under `name`; `origin` is the module that registers it (default the
        item's own `__module__`), which tells pazo's own registrations from a plugin's."""
        def add(item: T) -> T:
            registering = origin or getattr(item, "__module__", None) or ""
            if name in self._items:
                raise DuplicateNameError(self.kind, name, self._origins[name], registering)
            self._items[name] = item
            self._origins[name] = registering
            return item
        return add

    def origin(self, name: str) -> str:
        """The module that registered `name`."""
        self.get(name)
        return self._origins[name]

    def builtin(self, name: str) -> bool:
        """Whether pazo itself registered `name` (not a plugin): what the generated docs show."""
        origin = self.origin(name)
        return origin == "pazo" or origin.startswith("pazo.")

    def get(self, name: str) -> T:
        if name not in self._items:
            raise UnknownNameError(unknown_choice(self.kind, name, self._items))
        return self._items[name]

    def __contains__(self, name: str) -> bool:
        return name in self._items

    def names(self) -> list[str]:
        return sorted(self._items)

    def items(self) -> list[tuple[str, T]]:
        """(name, item) pairs in registration order."""
        return list(self._items.items())
