"""Name -> builder maps with errors that list the valid names."""
from __future__ import annotations

from typing import Callable, Dict, Iterator, Optional, Sequence, TypeVar

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
    """A small mapping from lower-case names to builders; every registry of the package is named
    ``<THING>_REGISTRY`` and its `kind` is what a user sets (a config key, a flag's subject).

    ``REG.get(name)`` raises an :class:`UnknownNameError` (a KeyError) that lists every valid
    name when `name` is unknown. `declared` names the builders in advance where a program lists
    them before the builders' modules are loaded (a light ``options.py``, for ``--help``): then
    only those names may register.
    """

    def __init__(self, kind: str, declared: Optional[Sequence[str]] = None) -> None:
        self.kind = kind
        self.declared = None if declared is None else tuple(str(n).lower() for n in declared)
        self._items: Dict[str, Callable] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def deco(fn: T) -> T:
            key = name.lower()
            if key in self._items:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            if self.declared is not None and key not in self.declared:
                raise ValueError(f"{self.kind} {name!r} is not among the declared names {self.declared}; "
                                 "add it to the package's options.py")
            self._items[key] = fn
            return fn

        return deco

    def get(self, name: str) -> Callable:
        key = str(name).lower()
        if key not in self._items:
            raise UnknownNameError(f"Unknown {self.kind} {name!r}. Valid names: {', '.join(self.names())}.")
        return self._items[key]

    def names(self) -> list:
        return sorted(self._items)

    def __contains__(self, name: str) -> bool:
        return str(name).lower() in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._items))
