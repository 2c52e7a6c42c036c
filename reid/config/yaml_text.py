"""Reading YAML config text with bounds: the one place every config file and stored config is parsed.

A config may come from someone else (a downloaded run folder, the ``cfg`` entry of a
checkpoint). YAML lets a few hundred bytes describe an enormous document: an anchor (``&a``)
can be repeated by aliases (``*a``) inside other anchors, so nine levels of nine aliases
expand to 9**9 values, and an anchor may even contain itself. PyYAML builds such a document
cheaply (aliases share one Python object), but everything that walks it afterwards (type
checks, copies, an error message that prints a value) expands it. So before a document is
built, its node graph is measured with every alias expanded, and refused past
:data:`MAX_NODES` values, :data:`MAX_DEPTH` levels, or when it contains itself; the text
itself may not exceed :data:`MAX_BYTES`. Real configs are a few kB with a few hundred values.

Values that do reach an error message are shortened by :func:`brief`.

YAML is read as YAML 1.1 (PyYAML's SafeLoader, which builds only plain values); booleans come
back as :class:`YamlBool` so that a boolean given to a string key can be reported with the
word the file used (``off``, ``Yes``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional

import yaml

from reid.utils.text_files import brief

#: Largest config text accepted (bytes); shipped configs are under 4 kB.
MAX_BYTES = 1 << 20
#: Most values (scalars, lists and mappings, aliases counted at every use) in one document.
MAX_NODES = 100_000
#: Deepest nesting of lists and mappings; the schema itself is 4 levels deep.
MAX_DEPTH = 64


class YamlTextError(ValueError):
    """Config text that is not YAML, or exceeds the bounds above; the message says which."""


@dataclass(slots=True, eq=False)
class YamlBool:
    """A boolean read from a YAML file, with the word the file used (``off``, ``Yes``, ...).

    Kept until the value meets its key, so that a boolean given to a string key (YAML 1.1
    turns ``AMP: off`` into False) can be reported with the user's own word.
    """

    value: bool
    text: str

    def __repr__(self) -> str:
        return repr(self.value)


class _ConfigLoader(yaml.SafeLoader):
    """SafeLoader that wraps booleans in :class:`YamlBool`; everything else is unchanged."""


def _construct_bool(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> YamlBool:
    return YamlBool(loader.construct_yaml_bool(node), str(node.value))


_ConfigLoader.add_constructor("tag:yaml.org,2002:bool", _construct_bool)


def _children(node: yaml.Node) -> list:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def check_node_graph(root: yaml.Node) -> None:
    """Refuse a composed document that contains itself, nests too deeply or expands too far.

    Iterative (a deep document must not exhaust Python's stack) and memoised per node, so the
    check costs one visit per distinct node however often aliases repeat it.
    """
    expanded: Dict[int, int] = {}
    on_path = set()
    stack = [(root, 0, False)]
    while stack:
        node, depth, done = stack.pop()
        key = id(node)
        if done:
            on_path.discard(key)
            size = 1 + sum(expanded[id(c)] for c in _children(node))
            if size > MAX_NODES:
                raise YamlTextError(
                    f"it expands to more than {MAX_NODES:,} values (anchors repeated by aliases); "
                    "a config needs a few hundred: write the values out"
                )
            expanded[key] = size
            continue
        if key in expanded:
            continue
        if key in on_path:
            raise YamlTextError("an anchor contains an alias of itself (a recursive value); remove the alias")
        if depth > MAX_DEPTH:
            raise YamlTextError(f"it nests lists or mappings more than {MAX_DEPTH} levels deep")
        on_path.add(key)
        stack.append((node, depth, True))
        stack.extend((c, depth + 1, False) for c in _children(node) if id(c) not in expanded)


def _where(error: yaml.YAMLError) -> str:
    """What PyYAML found wrong and where, without the snippet of text it would quote.

    The file may not be a config at all (a path named by mistake, or by someone else's
    ``_BASE_``), and its contents have no place in an error message.
    """
    problem = getattr(error, "problem", None) or type(error).__name__
    mark = getattr(error, "problem_mark", None)
    return f"{problem} at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else str(problem)


def parse_yaml_text(text: str) -> Optional[Any]:
    """The document in `text` (YAML 1.1, plain values, booleans as :class:`YamlBool`).

    Raises YamlTextError (its message says what is wrong, without the source's name) for text
    over :data:`MAX_BYTES`, invalid YAML, and documents that :func:`check_node_graph` refuses.
    """
    if len(text.encode("utf-8", errors="replace")) > MAX_BYTES:
        raise YamlTextError(f"it is larger than {MAX_BYTES // 1024} kB; a config file is a few kB of YAML")
    loader = _ConfigLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        check_node_graph(node)
        return loader.construct_document(node)
    except YamlTextError:
        raise
    except RecursionError:
        raise YamlTextError(f"it nests lists or mappings more than {MAX_DEPTH} levels deep") from None
    except yaml.YAMLError as e:
        raise YamlTextError(f"it is not valid YAML ({_where(e)})") from None
    except ValueError as e:  # e.g. an integer of more than 4300 digits
        raise YamlTextError(f"it holds a value that cannot be read ({brief(str(e))})") from None
    finally:
        loader.dispose()


__all__ = ["MAX_BYTES", "MAX_DEPTH", "MAX_NODES", "YamlBool", "YamlTextError", "brief", "check_node_graph",
           "parse_yaml_text"]
