"""The store as a service: an HTTP API (FastAPI) and a review page, with tokens (docs/service.md).

- app.py: ``create_app(store, tokens, embed=..., model_name=...)``; tokens.py: who may read or
  review; uploads.py: query images decoded safely; params.py: query parameters checked;
  static/: the page (no request leaves the machine).

Needs the ``service`` extra (``pip install "circle-reid[service]"``).
"""
from reid.utils.lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(__name__, {
    "reid.service.app": ["create_app"],
    "reid.service.tokens": ["Tokens", "store_tokens"],
})

__all__ = sorted(__dir__())
