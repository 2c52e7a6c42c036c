"""Loading, merging and validating configurations.

yacs gives us an attribute-style tree with freezing; we add what users need on top:
``_BASE_`` inheritance between YAML files (paths relative to the including file), and
merging that names the offending key, suggests the closest valid keys, and checks types
(an int is accepted where a float is expected; a list where a list is expected).

YAML files are read as YAML 1.1 (PyYAML), which has two traps for config files: a number in
exponent form without a dot (``1e-3``) is a string, and an unquoted ``on``/``off``/``yes``/
``no``/``true``/``false`` is a boolean. The first is accepted (the string is read as the
number); the second gets an error that explains the rule and shows the quoted form.
"""
from __future__ import annotations

import ast
import contextlib
import copy
import difflib
import functools
import math
import operator
import os
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from yacs.config import CfgNode

from reid.utils.path_kinds import MISSING, file_problem, is_missing

from .defaults import _C, BOOL_OR_WORD, FILE_KEYS, NUMBER_OR_WORD
from .differences import leaves
from .errors import ConfigError
from .sie_keys import move_clip_keys
from .yaml_text import MAX_BYTES, YamlBool, YamlTextError, brief, parse_yaml_text

BASE_KEY = "_BASE_"
#: Longest chain of files included through _BASE_ (the shipped configs use 2).
MAX_BASE_DEPTH = 16


def get_cfg() -> CfgNode:
    """Return a fresh, mutable copy of the default configuration."""
    return _C.clone()


def key_value(node: Any, key: str) -> Any:
    """The value of dotted `key` (e.g. ``"SOLVER.BASE_LR"``) in config `node`."""
    return functools.reduce(operator.getitem, key.split("."), node)


def _suggest(key: str, root: CfgNode) -> str:
    candidates = [k for k, _ in leaves(root)]
    close = difflib.get_close_matches(key, candidates, n=3, cutoff=0.5)
    if not close:
        # Fall back to matching the last component (e.g. "LR" -> "SOLVER.BASE_LR").
        last = key.rsplit(".", 1)[-1]
        close = [c for c in candidates if last in c.rsplit(".", 1)[-1]][:3]
    return f" Did you mean: {', '.join(close)}?" if close else ""


def _plain(value: Any) -> Any:
    """`value` with every :class:`YamlBool` inside it turned back into a bool."""
    if isinstance(value, YamlBool):
        return value.value
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _number_from_text(text: str) -> Optional[float]:
    """The finite number `text` spells (``"1e-3"``, ``"5"``), or None."""
    try:
        number = float(text)
    except ValueError:
        return None
    # "nan" / "inf" parse too, but no key takes them and the command line refuses them as well.
    return number if math.isfinite(number) else None


def _coerce(key: str, current: Any, value: Any, source: str, from_yaml: bool = False) -> Any:
    """Return `value` converted to the type of `current` (the key's value so far), or raise ConfigError.

    `from_yaml` marks a value parsed by YAML 1.1 (a config file): there a number such as
    ``1e-3`` arrives as a string and is read as the number it spells.
    """
    yaml_word = value.text if isinstance(value, YamlBool) else None
    if yaml_word is not None:
        value = value.value

    def fail(hint: str = "") -> ConfigError:
        # `current` is what earlier files or overrides left, not necessarily the default; for a
        # list item (KEY[i]) it is only the item type's example, so it is not shown.
        shown = "" if "[" in key else f" (current value {brief(current)})"
        return ConfigError(
            f"{source}: key {key} expects a value of type {type(current).__name__}{shown}, "
            f"got {brief(value)} ({type(value).__name__}).{hint}"
        )

    words = NUMBER_OR_WORD.get(key)
    if words is not None:  # a number, or a word that asks for one to be chosen (UDA.EPS auto)
        if isinstance(value, str) and value.strip().lower() in words:
            return value.strip().lower()
        number = _number_from_text(value) if isinstance(value, str) else value
        if isinstance(number, (int, float)) and not isinstance(number, bool):
            return float(number)
        raise ConfigError(f"{source}: key {key} expects a number or {' or '.join(repr(w) for w in words)}, "
                          f"got {brief(value)} ({type(value).__name__}).")
    words = BOOL_OR_WORD.get(key)
    if words is not None:  # true/false, or a word that asks for the data to decide (UDA.CAMERA_AWARE auto)
        if isinstance(value, bool):
            return value
        text = value.strip().lower() if isinstance(value, str) else None
        if text in words:
            return text
        if text in ("true", "false"):
            return text == "true"
        raise ConfigError(f"{source}: key {key} expects true, false or {' or '.join(repr(w) for w in words)}, "
                          f"got {brief(value)} ({type(value).__name__}).")
    number = _number_from_text(value) if isinstance(value, str) and from_yaml else value
    if isinstance(current, bool):
        if isinstance(value, bool):
            return value
        raise fail()
    if isinstance(current, int):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(number, float) and number.is_integer():
            # int() of the text keeps every digit of a long integer that a float would round
            try:
                return int(value)
            except (TypeError, ValueError):
                return int(number)
        raise fail()
    if isinstance(current, float):
        if isinstance(number, (int, float)) and not isinstance(number, bool):
            return float(number)
        raise fail()
    if isinstance(current, str):
        if isinstance(value, str):
            return value
        if from_yaml and isinstance(value, bool):
            word = yaml_word if yaml_word is not None else ("true" if value else "false")
            # inside a list (KEY[i]) the fix is the quoted word alone, not "KEY: word"
            fix = f'"{word}"' if "[" in key else f'{key.rsplit(".", 1)[-1]}: "{word}"'
            raise fail(
                f" YAML 1.1 reads an unquoted on/off/yes/no/true/false as a boolean, so {word} became "
                f"{value}; quote it: {fix}"
            )
        if from_yaml and value is None:
            name = key.rsplit(".", 1)[-1]
            raise fail(f' An empty value is null in YAML; for an empty string write {name}: ""')
        raise fail()
    if isinstance(current, (list, tuple)):
        if isinstance(value, str):
            # A single name given where a list is expected (e.g. DATASETS.NAMES market1501).
            value = [value]
        if not isinstance(value, (list, tuple)):
            raise fail()
        proto = current[0] if current else _default_of(key)
        if proto is not None:
            return [_coerce(f"{key}[{i}]", proto, v, source, from_yaml) for i, v in enumerate(value)]
        return _plain(list(value))
    return _plain(value)


def _default_of(key: str) -> Any:
    """First element of the default list of `key` (its element type), or None if unknown/empty."""
    try:
        node = key_value(_C, key)
    except (KeyError, TypeError):
        return None
    return node[0] if isinstance(node, (list, tuple)) and node else None


def _merge_dict(cfg: CfgNode, data: Dict[str, Any], source: str, prefix: str = "",
                unknown: Optional[List[str]] = None) -> None:
    """Merge `data` into `cfg`, validating every key and value; with an `unknown` list, keys this
    version does not have are recorded there and skipped instead of refused."""
    for k, v in data.items():
        full = f"{prefix}{k}"
        if k not in cfg and unknown is not None:
            unknown.append(full)
            continue
        if k not in cfg:
            raise ConfigError(f"{source}: unknown config key {full}.{_suggest(full, _C)}")
        current = cfg[k]
        if isinstance(current, CfgNode):
            if not isinstance(v, dict):
                raise ConfigError(
                    f"{source}: key {full} is a section; give it a mapping of sub-keys, got {brief(v)}."
                )
            _merge_dict(current, v, source, full + ".", unknown)
        else:
            cfg[k] = _coerce(full, current, v, source, from_yaml=True)


def _parse(text: str, source: str) -> Dict[str, Any]:
    """The document in `text` as a mapping of keys (an empty document is an empty mapping)."""
    try:
        data = parse_yaml_text(text)
    except YamlTextError as e:
        raise ConfigError(f"{source} cannot be used as a config: {e}.") from None
    if data is not None and not isinstance(data, dict):
        raise ConfigError(f"{source} must contain a mapping of keys, got {type(data).__name__}.")
    return data or {}


def _read_yaml_file(path: str) -> Dict[str, Any]:
    """The mapping in config file `path`, read within the bounds of reid/config/yaml_text.py."""
    problem = file_problem(path)  # a FIFO or a device would block or never end
    if is_missing(problem):
        raise ConfigError(f"Config file not found: {path}" + ("" if problem == MISSING else f" (it {problem})"))
    if problem:
        raise ConfigError(f"Config file {path} {problem}; name a .yml/.yaml file.")
    source = f"Config file {path}"
    try:
        with open(path, "r", encoding="utf-8") as f:
            text = f.read(MAX_BYTES + 1)
    except UnicodeDecodeError:
        raise ConfigError(f"{source} is not UTF-8 text; name a .yml/.yaml config file.") from None
    except OSError as e:
        raise ConfigError(f"{source} cannot be read ({e.strerror or e}).") from None
    data = _parse(text, source)
    # Checked file by file, so an unknown key or a bad value is reported in the file that holds it.
    _merge_dict(get_cfg(), {k: v for k, v in data.items() if k != BASE_KEY}, source)
    return data


def _read_yaml_with_bases(path: str, seen: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    path = os.path.abspath(path)
    seen = list(seen or [])
    if path in seen:
        chain = " -> ".join(seen + [path])
        raise ConfigError(f"Config files include each other in a loop: {chain}")
    if len(seen) >= MAX_BASE_DEPTH:
        raise ConfigError(f"Config file {seen[0]}: its {BASE_KEY} chain is more than {MAX_BASE_DEPTH} files deep.")
    data = _read_yaml_file(path)
    bases = data.pop(BASE_KEY, None)
    if bases is None:
        return data
    if isinstance(bases, str):
        bases = [bases]
    if not isinstance(bases, list) or not all(isinstance(b, str) for b in bases):
        raise ConfigError(
            f"Config file {path}: {BASE_KEY} must be a file path or a list of paths, got {brief(bases)}."
        )
    merged: Dict[str, Any] = {}
    for base in bases:
        base_path = base if os.path.isabs(base) else os.path.join(os.path.dirname(path), base)
        _deep_update(merged, _read_yaml_with_bases(base_path, seen + [path]))
    _deep_update(merged, data)
    return merged


def _deep_update(dst: Dict[str, Any], src: Dict[str, Any]) -> None:
    for k, v in src.items():
        if isinstance(v, dict) and isinstance(dst.get(k), dict):
            _deep_update(dst[k], v)
        else:
            dst[k] = copy.deepcopy(v)


def merge_from_file(cfg: CfgNode, config_file: str, allow_bases: bool = True) -> None:
    """Merge a YAML file (following its ``_BASE_`` chain) into `cfg`, validating every key.

    With `allow_bases` False the file must be self-contained (a run's ``config.yaml`` always
    is): a ``_BASE_`` entry is refused instead of read.
    """
    if allow_bases:
        data = _read_yaml_with_bases(config_file)
    else:
        data = _read_yaml_file(os.path.abspath(config_file))
        _refuse_bases(data, f"Config file {config_file}", "a run's config.yaml is self-contained (train.py "
                      "writes it merged); pass the original config with --config-file instead")
    _merge_dict(cfg, data, f"config file {config_file}")


def _refuse_bases(data: Dict[str, Any], source: str, why: str) -> None:
    if BASE_KEY in data:
        raise ConfigError(f"{source} names {BASE_KEY} {brief(data[BASE_KEY])}, which is not read here: {why}.")


def merge_from_text(cfg: CfgNode, text: str, source: str, unknown: Optional[List[str]] = None) -> List[str]:
    """Merge config `text` stored inside another file (a checkpoint's ``cfg`` entry) into `cfg`.

    Such text travels with files from other people, so it may not point anywhere: ``_BASE_``
    is refused, and the keys that name files or folders (:data:`FILE_KEYS`: OUTPUT_DIR,
    MODEL.WEIGHTS, DATASETS.ROOT, ...) are left at their values in `cfg`. Returns the file
    keys the text tried to set. `source` names the file in error messages. With an `unknown`
    list, keys of another version of circle-reid are recorded there instead of refused.
    """
    if not isinstance(text, str):
        raise ConfigError(f"{source}: its stored config is a {type(text).__name__}, not YAML text.")
    data = _parse(text, source)
    _refuse_bases(data, source, "a stored config must be self-contained; pass the run's config.yaml with "
                  "--config-file instead")
    dropped = []
    for key in FILE_KEYS:
        parts = key.split(".")
        node = data
        for part in parts[:-1]:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict) and parts[-1] in node:
            del node[parts[-1]]
            dropped.append(key)
    _merge_dict(cfg, data, source, unknown=unknown)
    return dropped


def _parse_value(text: Any) -> Any:
    if not isinstance(text, str):
        return text
    with contextlib.suppress(ValueError, SyntaxError):
        return ast.literal_eval(text)
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    return text


def _parse_str_list(key: str, text: Any) -> Any:
    """A command-line value for a list-of-strings key: ``a``, ``a,b``, ``[a,b]`` or a Python literal.

    Bash removes the quotes of ``["custom"]`` and passes ``[custom]``, which is no Python
    literal; without this the brackets would become part of the name.
    """
    if not isinstance(text, str):
        return text
    s = text.strip()
    with contextlib.suppress(ValueError, SyntaxError):
        value = ast.literal_eval(s)
        if isinstance(value, (list, tuple, str)):
            return value
    opened, closed = s.startswith("["), s.endswith("]")
    if opened != closed:
        raise ConfigError(
            f"command line: key {key} got {brief(text)}, which has an unmatched bracket (a space inside "
            f"[...] splits it into two arguments). Write the names without spaces, e.g. {key} a,b "
            f"or {key} [a,b]."
        )
    inner = s[1:-1] if opened else s
    items = [item.strip() for item in inner.split(",")]
    if len(items) > 1 and items[-1] == "":
        items.pop()  # a trailing comma, as Python allows
    if any(not item for item in items):
        raise ConfigError(
            f"command line: key {key} got {brief(text)}, which has an empty name between commas; "
            f"write the names separated by single commas, e.g. {key} a,b."
        )
    return [_unquote(item) for item in items]


def _unquote(item: str) -> str:
    # One quoted item among unquoted ones (['a', b]) is not a literal as a whole.
    if len(item) >= 2 and item[0] == item[-1] and item[0] in "'\"":
        return item[1:-1]
    return item


def _is_str_list(key: str, current: Any) -> bool:
    """Whether `key` holds a list of strings (judged by its current value, else its default)."""
    if not isinstance(current, (list, tuple)):
        return False
    proto = current[0] if current else _default_of(key)
    return isinstance(proto, str)


def merge_from_list(cfg: CfgNode, opts: Iterable[Any]) -> None:
    """Merge ``["KEY", "VALUE", ...]`` overrides (command-line style) into `cfg`.

    Values are Python literals (``0.1``, ``[40, 90]``, ``True``) or plain words. Keys that hold
    a list of strings also take ``a``, ``a,b`` and ``[a,b]`` with unquoted names, since the
    shell strips the quotes of ``["a"]``.
    """
    opts = list(opts)
    if len(opts) % 2 != 0:
        raise ConfigError(
            f"Command-line overrides must come in KEY VALUE pairs; got {len(opts)} items: {opts}"
        )
    for key, raw in zip(map(str, opts[0::2]), opts[1::2]):
        parent, _, name = key.rpartition(".")
        try:
            node = key_value(cfg, parent) if parent else cfg
            current = node[name]
        except (KeyError, TypeError):
            raise ConfigError(f"command line: unknown config key {key}.{_suggest(key, _C)}") from None
        if isinstance(current, CfgNode):
            raise ConfigError(f"command line: key {key} is a section; set one of its sub-keys instead.")
        value = _parse_str_list(key, raw) if _is_str_list(key, current) else _parse_value(raw)
        node[name] = _coerce(key, current, value, "command line")


# Bounds on values that size memory at once (input pixels, batches, worker processes): a config
# from someone else (a checkpoint's, a downloaded run's) must not make a tool allocate without end.
_RANGES = {
    "INPUT.SIZE_TRAIN": (1, 4096),
    "INPUT.SIZE_TEST": (1, 4096),
    "SOLVER.IMS_PER_BATCH": (1, 65536),
    "TEST.IMS_PER_BATCH": (1, 65536),
    "DATALOADER.NUM_WORKERS": (0, 256),
}


def value_range(key: str) -> Tuple[int, int]:
    """The bounds ``(low, high)`` of a bounded config key (e.g. ``INPUT.SIZE_TEST``), so that a
    command-line flag with the same meaning (``--input-size``, ``--batch-size``) gets the same ones."""
    return _RANGES[key]


def check_ranges(cfg: CfgNode, source: str = "config") -> None:
    """Raise ConfigError when a key of _RANGES (or an element of it) lies outside its bounds."""
    for key, (low, high) in _RANGES.items():
        node = key_value(cfg, key)
        for value in node if isinstance(node, (list, tuple)) else [node]:
            if not low <= value <= high:
                raise ConfigError(f"{source}: {key} {brief(node)} is out of range; each value must lie in "
                                  f"[{low}, {high}].")


def load_config(config_file: Optional[str] = None, opts: Optional[Sequence[Any]] = None,
                allow_bases: bool = True) -> CfgNode:
    """Defaults, then `config_file` (with its ``_BASE_`` chain), then `opts`; returned frozen.

    `allow_bases` False refuses a ``_BASE_`` entry (see :func:`merge_from_file`).
    """
    cfg = get_cfg()
    if config_file:
        merge_from_file(cfg, config_file, allow_bases=allow_bases)
    source = f"config file {config_file}" if config_file else None
    return _finish(cfg, opts, source or "command line", source or "config")


def _finish(cfg: CfgNode, opts: Optional[Sequence[Any]], source: str, ranges_source: str) -> CfgNode:
    """`cfg` with the overrides `opts`, a CLIP model's keys of the previous layout (MODEL.TRANSREID)
    moved with one warning line naming `source`, and its ranges checked; frozen."""
    if opts:
        merge_from_list(cfg, opts)
    move_clip_keys(cfg, _C, source, list(opts or [])[0::2])
    check_ranges(cfg, ranges_source)
    cfg.freeze()
    return cfg


def load_config_from_text(text: str, source: str, opts: Optional[Sequence[Any]] = None,
                          unknown: Optional[List[str]] = None) -> CfgNode:
    """Defaults, then the config `text` stored in file `source` (:func:`merge_from_text`; `unknown`
    as there), then `opts`; frozen."""
    cfg = get_cfg()
    merge_from_text(cfg, text, source, unknown)
    return _finish(cfg, opts, source, source)


def save_config(cfg: CfgNode, path: str) -> None:
    """Write the merged config as YAML that `load_config` reads back to an equal config."""
    from reid.utils.file_io import atomic_write_text

    atomic_write_text(path, cfg.dump())
