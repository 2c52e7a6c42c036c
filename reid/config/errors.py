"""The error of a configuration a user gave (kept apart so that every config module raises the same one)."""


class ConfigError(ValueError):
    """A configuration file or override is invalid (unknown key, wrong type, bad file)."""


__all__ = ["ConfigError"]
