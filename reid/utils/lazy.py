"""Package faces that load their modules on first use (PEP 562 module ``__getattr__``).

A command-line program imports light modules of a package (the names a user may choose, such
as ``reid.export.options``) to answer ``--help`` at once; an eager ``__init__`` would load torch
with them. A package whose face is built here imports a module only when one of its names is
first asked for::

    __getattr__, __dir__ = lazy_exports(__name__, {"reid.search.gallery": ["Gallery", "load_gallery"]})

``tests/test_package_structure.py`` reads the module names of these tables as imports, so the
layering rules hold for them as for ``import`` statements.
"""
from __future__ import annotations

import importlib
import sys
from typing import Callable, Dict, List, Sequence, Tuple


def lazy_exports(package: str, table: Dict[str, Sequence[str]]) -> Tuple[Callable[[str], object], Callable[[], List[str]]]:
    """``(__getattr__, __dir__)`` for the package named `package`: each name of ``table[module]``
    comes from that module (a full dotted name), imported the first time the name is asked for."""
    source = {name: module for module, names in table.items() for name in names}
    if len(source) != sum(len(names) for names in table.values()):
        raise ValueError(f"{package}: a name is listed under two modules")

    def __getattr__(name: str) -> object:
        module = source.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)  # later look-ups skip this function
        return value

    def __dir__() -> List[str]:
        return sorted(set(vars(sys.modules[package])) | set(source))

    return __getattr__, __dir__


__all__ = ["lazy_exports"]
