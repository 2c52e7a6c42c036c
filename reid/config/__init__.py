"""Configuration: defaults, YAML loading with ``_BASE_``, validated overrides."""
from .config import ConfigError, get_cfg, load_config, merge_from_file, merge_from_list, save_config

__all__ = ["ConfigError", "get_cfg", "load_config", "merge_from_file", "merge_from_list", "save_config"]
