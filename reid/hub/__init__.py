"""Published re-ID weights by name: the catalogue, the cache, verified downloads (docs/model_zoo.md).

  catalogue.py: one entry per published file (name, family, format, config, sources, sha256, numbers);
  zoo_*.py: the entries of each publisher; download.py: one file whole and verified, or nothing;
  sources.py: direct, Google Drive and Hugging Face addresses; cache.py: where files live, offline mode;
  resolve.py: ``--weights NAME`` -> a local file and its config.
"""
from .catalogue import ENTRIES, HubEntry, UnknownModelError, by_name, entry, suggest
from .download import DownloadError
from .resolve import Resolved, fetch_entry, looks_like_name, resolve_weights

__all__ = ["DownloadError", "ENTRIES", "HubEntry", "Resolved", "UnknownModelError", "by_name", "entry",
           "fetch_entry", "looks_like_name", "resolve_weights", "suggest"]
