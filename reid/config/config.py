"""Loading, merging and validating configurations.

yacs gives us an attribute-style tree with freezing; we add what users need on top:
``_BASE_`` inheritance between YAML files (paths relative to the including file), and
merging that names the offending key, suggests the closest valid keys, and checks types
(an int is accepted where a float is expected; a list where a list is expected).
"""
from __future__ import annotations

import ast
import copy
import difflib
import os
from typing import Any, Dict, Iterable, List, Optional, Sequence

import yaml
from yacs.config import CfgNode

from .defaults import _C

BASE_KEY = "_BASE_"


class ConfigError(ValueError):
    """A configuration file or override is invalid (unknown key, wrong type, bad file)."""


def get_cfg() -> CfgNode:
    """Return a fresh, mutable copy of the default configuration."""
    return _C.clone()


def _all_keys(node: CfgNode, prefix: str = "") -> List[str]:
    keys = []
    for k, v in node.items():
        full = f"{prefix}{k}"
        if isinstance(v, CfgNode):
            keys.extend(_all_keys(v, full + "."))
        else:
            keys.append(full)
    return keys


def _suggest(key: str, root: CfgNode) -> str:
    candidates = _all_keys(root)
    close = difflib.get_close_matches(key, candidates, n=3, cutoff=0.5)
    if not close:
        # Fall back to matching the last component (e.g. "LR" -> "SOLVER.BASE_LR").
        last = key.rsplit(".", 1)[-1]
        close = [c for c in candidates if last in c.rsplit(".", 1)[-1]][:3]
    return f" Did you mean: {', '.join(close)}?" if close else ""


def _coerce(key: str, default: Any, value: Any, source: str) -> Any:
    """Return `value` converted to the type of `default`, or raise ConfigError."""
    def fail() -> ConfigError:
        return ConfigError(
            f"{source}: key {key} expects a value of type {type(default).__name__} "
            f"(default {default!r}), got {value!r} ({type(value).__name__})."
        )

    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
        raise fail()
    if isinstance(default, int):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise fail()
    if isinstance(default, float):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise fail()
    if isinstance(default, str):
        if isinstance(value, str):
            return value
        raise fail()
    if isinstance(default, (list, tuple)):
        if isinstance(value, str):
            # A single name given where a list is expected (e.g. DATASETS.NAMES market1501).
            value = [value]
        if not isinstance(value, (list, tuple)):
            raise fail()
        if default:
            proto = default[0]
            return [_coerce(f"{key}[{i}]", proto, v, source) for i, v in enumerate(value)]
        return list(value)
    return value


def _merge_dict(cfg: CfgNode, data: Dict[str, Any], source: str, prefix: str = "") -> None:
    for k, v in data.items():
        full = f"{prefix}{k}"
        if k not in cfg:
            raise ConfigError(f"{source}: unknown config key {full}.{_suggest(full, _C)}")
        current = cfg[k]
        if isinstance(current, CfgNode):
            if not isinstance(v, dict):
                raise ConfigError(
                    f"{source}: key {full} is a section; give it a mapping of sub-keys, got {v!r}."
                )
            _merge_dict(current, v, source, full + ".")
        else:
            cfg[k] = _coerce(full, current, v, source)


def _read_yaml_with_bases(path: str, seen: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    path = os.path.abspath(path)
    seen = list(seen or [])
    if path in seen:
        chain = " -> ".join(seen + [path])
        raise ConfigError(f"Config files include each other in a loop: {chain}")
    if not os.path.isfile(path):
        raise ConfigError(f"Config file not found: {path}")
    with open(path, "r", encoding="utf-8") as f:
        try:
            data = yaml.safe_load(f) or {}
        except yaml.YAMLError as e:
            raise ConfigError(f"Config file {path} is not valid YAML: {e}") from e
    if not isinstance(data, dict):
        raise ConfigError(f"Config file {path} must contain a mapping of keys, got {type(data).__name__}.")
    bases = data.pop(BASE_KEY, None)
    if bases is None:
        return data
    if isinstance(bases, str):
        bases = [bases]
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


def merge_from_file(cfg: CfgNode, config_file: str) -> None:
    """Merge a YAML file (following its ``_BASE_`` chain) into `cfg`, validating every key."""
    data = _read_yaml_with_bases(config_file)
    _merge_dict(cfg, data, f"config file {config_file}")


def _parse_value(text: Any) -> Any:
    if not isinstance(text, str):
        return text
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        pass
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    return text


def merge_from_list(cfg: CfgNode, opts: Iterable[Any]) -> None:
    """Merge ``["KEY", "VALUE", ...]`` overrides (command-line style) into `cfg`."""
    opts = list(opts)
    if len(opts) % 2 != 0:
        raise ConfigError(
            f"Command-line overrides must come in KEY VALUE pairs; got {len(opts)} items: {opts}"
        )
    for key, raw in zip(opts[0::2], opts[1::2]):
        node = cfg
        parts = str(key).split(".")
        for i, part in enumerate(parts):
            if not isinstance(node, CfgNode) or part not in node:
                raise ConfigError(f"command line: unknown config key {key}.{_suggest(str(key), _C)}")
            if i < len(parts) - 1:
                node = node[part]
        current = node[parts[-1]]
        if isinstance(current, CfgNode):
            raise ConfigError(f"command line: key {key} is a section; set one of its sub-keys instead.")
        node[parts[-1]] = _coerce(str(key), current, _parse_value(raw), "command line")


def load_config(config_file: Optional[str] = None, opts: Optional[Sequence[Any]] = None) -> CfgNode:
    """Defaults, then `config_file` (with its ``_BASE_`` chain), then `opts`; returned frozen."""
    cfg = get_cfg()
    if config_file:
        merge_from_file(cfg, config_file)
    if opts:
        merge_from_list(cfg, opts)
    cfg.freeze()
    return cfg


def save_config(cfg: CfgNode, path: str) -> None:
    """Write the merged config as YAML that `load_config` reads back to an equal config."""
    from reid.utils.file_io import atomic_write_text

    atomic_write_text(path, cfg.dump())
