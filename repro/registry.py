"""Named entries of one kind (algorithms, transforms, off-policy sources): the one lookup, and
the one-line refusals of an unknown name and of a second entry under a taken name, so every
registry of the package answers alike."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """Entries by name, in registration order; `kind` names them in errors ("algorithm")."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, T] = {}

    def add(self, name: str, entry: T) -> T:
        """Register `entry` under `name`; registering the same entry again (a module imported
        twice) is a no-op, another one under a taken name an error."""
        known = self._entries.get(name)
        if known is not None and known != entry:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self._entries[name] = entry
        return entry

    def get(self, name: str) -> T:
        try:
            return self._entries[name]
        except KeyError:
            raise ValueError(f"unknown {self.kind} {name!r}; known: {self.names()}") from None

    def names(self) -> list[str]:
        """The names, sorted (for messages and help)."""
        return sorted(self._entries)

    def __iter__(self) -> Iterator[str]:
        """The names in registration order."""
        return iter(self._entries)
