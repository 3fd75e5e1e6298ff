"""Name -> builder registries, so that configs pick components by name and a typo lists the choices."""
from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class UnknownNameError(ValueError):
    pass


class Registry(Generic[T]):
    def __init__(self, kind: str):
        self.kind, self._items = kind, {}

    def register(self, name: str) -> Callable[[T], T]:
        def add(item: T) -> T:
            if name in self._items:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._items[name] = item
            return item
        return add

    def get(self, name: str) -> T:
        if name not in self._items:
            raise UnknownNameError(
                f"unknown {self.kind} {name!r}; choices: {', '.join(sorted(self._items))}")
        return self._items[name]

    def __contains__(self, name: str) -> bool:
        return name in self._items

    def names(self) -> list[str]:
        return sorted(self._items)

    def items(self) -> list[tuple[str, T]]:
        """(name, item) pairs in registration order."""
        return list(self._items.items())
