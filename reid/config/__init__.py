"""Configuration: defaults, YAML loading with ``_BASE_``, validated overrides."""
from .config import (
    get_cfg,
    load_config,
    load_config_from_text,
    merge_from_file,
    merge_from_list,
    merge_from_text,
    save_config,
    value_range,
)
from .defaults import FILE_KEYS
from .errors import ConfigError

__all__ = ["ConfigError", "FILE_KEYS", "get_cfg", "load_config", "load_config_from_text", "merge_from_file",
           "merge_from_list", "merge_from_text", "save_config", "value_range"]
