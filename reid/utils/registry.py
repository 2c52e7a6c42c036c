"""Name -> builder maps with errors that list the valid names."""
from __future__ import annotations

from typing import Callable, Dict, Iterator, TypeVar

T = TypeVar("T", bound=Callable)


class UnknownNameError(KeyError, ValueError):
    """A name missing from a name -> builder map; the message lists the valid names.

    A KeyError for mapping-style callers and a ValueError because it is a user's bad value
    (the command-line tools print such errors as one line, without a traceback).
    """

    def __str__(self) -> str:
        # KeyError's str() would wrap the message in quotes.
        return str(self.args[0]) if self.args else ""


class Registry:
    """A small mapping from lower-case names to builders.

    ``REG.get(name)`` raises an :class:`UnknownNameError` (a KeyError) that lists every valid
    name when `name` is unknown.
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: Dict[str, Callable] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def deco(fn: T) -> T:
            key = name.lower()
            if key in self._items:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._items[key] = fn
            return fn

        return deco

    def get(self, name: str) -> Callable:
        key = str(name).lower()
        if key not in self._items:
            valid = ", ".join(sorted(self._items))
            raise UnknownNameError(f"Unknown {self.kind} {name!r}. Valid names: {valid}.")
        return self._items[key]

    def names(self) -> list:
        return sorted(self._items)

    def __contains__(self, name: str) -> bool:
        return str(name).lower() in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._items))
