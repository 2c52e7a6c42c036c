"""The package's shape: no import cycles, imports only go down the layers, files stay short."""
import ast
import os
from typing import Dict, List, Set

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "reid")
# docs/architecture.md: data flows down this list; a module may import its own layer and lower ones.
LAYERS = ["utils", "hub", "config", "data", "modeling", "engine", "evaluation", "uda", "visualization", "search", "export",
          "inference", "training", "tracking", "adapt", "store", "service", "cli"]


def _module_files() -> Dict[str, str]:
    """Dotted module name -> file, for every module of reid/ (packages by their __init__)."""
    found = {}
    for folder, _, files in os.walk(PACKAGE):
        for name in files:
            if not name.endswith(".py"):
                continue
            rel = os.path.relpath(os.path.join(folder, name), ROOT)[:-3].split(os.sep)
            if rel[-1] == "__init__":
                rel = rel[:-1]
            found[".".join(rel)] = os.path.join(folder, name)
    return found


def _imports(module: str, path: str, modules: Set[str]) -> Set[str]:
    """Modules of reid that `module` imports anywhere in its file (lazy imports included).

    ``from pkg import name`` counts as importing ``pkg.name`` when that is a module, else ``pkg``;
    the modules a lazy package face names (``reid.utils.lazy.lazy_exports(__name__, {module: names})``)
    count as imported by it.
    """
    is_package = path.endswith("__init__.py")
    package = module if is_package else module.rpartition(".")[0]
    targets: Set[str] = set()
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read(), path)):
        if isinstance(node, ast.Import):
            targets.update(a.name for a in node.names if a.name.split(".")[0] == "reid")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if source.split(".")[0] != "reid":
                continue
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                targets.add(sub if sub in modules else source)
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "lazy_exports":
            table = node.args[1]
            assert isinstance(table, ast.Dict), f"{path}: lazy_exports takes its table as a dict literal"
            targets.update(key.value for key in table.keys if str(key.value).split(".")[0] == "reid")
    return {t for t in targets if t in modules and t != module}


@pytest.fixture(scope="module")
def graph() -> Dict[str, Set[str]]:
    files = _module_files()
    return {m: _imports(m, p, set(files)) for m, p in files.items()}


def _cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: List[List[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_module_imports_a_module_that_imports_it_back(graph):
    assert len(graph) > 50 and "reid.engine.train_loop" in graph
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_cycles():
    toy = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert _cycles(toy) == [["a", "b", "c"]]


def test_imports_only_go_down_the_layers(graph):
    def layer(module: str) -> int:
        parts = module.split(".")
        return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else -1

    upward = sorted(f"{m} -> {t}" for m, targets in graph.items() for t in targets
                    if layer(m) >= 0 and layer(t) > layer(m))
    assert upward == []


def test_no_file_is_too_long():
    lengths = {os.path.relpath(p, ROOT): sum(1 for _ in open(p, encoding="utf-8")) for p in _module_files().values()}
    assert {p: n for p, n in lengths.items() if n > 500} == {}
    assert lengths[os.path.join("reid", "engine", "train_loop.py")] <= 300
