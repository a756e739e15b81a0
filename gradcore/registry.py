"""Small name -> object registries.

Attacks, defenses, metrics, models and datasets are looked up by name, so a chapter
says ``gradcore.attack("dlg", ...)`` and a later chapter adds an entry without
touching an if/elif chain.
"""

from __future__ import annotations

from typing import Callable, Dict, Generic, Iterator, TypeVar

from .errors import GradcoreError

T = TypeVar("T")


class UnknownNameError(GradcoreError, KeyError):
    """An unknown registry name; the message lists the names that exist."""

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0])


class Registry(Generic[T]):
    """A named collection with clear errors for unknown names.

    Parameters
    ----------
    kind : str
        What the entries are ("attack", "defense", ...); used in error messages.
    """

    def __init__(self, kind: str):
        self.kind = kind
        self._entries: Dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator that stores an entry under ``name`` (refusing duplicates)."""

        def decorate(entry: T) -> T:
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            self._entries[name] = entry
            return entry

        return decorate

    def add(self, name: str, entry: T) -> T:
        """Store ``entry`` under ``name``; same as the decorator form."""
        return self.register(name)(entry)

    def __getitem__(self, name: str) -> T:
        try:
            return self._entries[name]
        except (KeyError, TypeError):  # TypeError: an unhashable name, e.g. a list
            known = ", ".join(sorted(self._entries)) or "none"
            plural = self.kind + ("es" if self.kind.endswith("s") else "s")  # "losses", not "losss"
            raise UnknownNameError(
                f"unknown {self.kind} {name!r}; known {plural}: {known}"
            ) from None

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._entries))

    def names(self) -> list[str]:
        """Registered names in alphabetical order."""
        return sorted(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}: {', '.join(self.names())})"
