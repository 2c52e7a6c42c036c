"""What every answer of the service carries (security headers) and what is refused before a route runs
(an unknown token, a body over its route's limit)."""
from __future__ import annotations

import json
from typing import Any, Dict, Sequence

from .tokens import Tokens

#: Largest JSON body (a split's list of tracklets fits many times over).
MAX_JSON_BYTES = 1 << 20
#: Multipart framing around an upload's bytes, allowed on top of the upload limit.
UPLOAD_OVERHEAD = 64 * 1024
#: The page may talk to this server only (no fonts, scripts or pictures from anywhere else).
CSP = ("default-src 'self'; img-src 'self' blob: data:; connect-src 'self'; style-src 'self'; script-src 'self'; "
       "frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
#: The API docs page (Swagger UI, from the fastapi-offline package) sets styles on its elements.
DOCS_CSP = ("default-src 'self'; img-src 'self' data:; connect-src 'self'; style-src 'self' 'unsafe-inline'; "
            "script-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")


class SecurityHeaders:
    """The content security policy (the docs page's own) and no sniffing or referrers, on every answer.
    Plain ASGI (headers added as the answer starts): Starlette's BaseHTTPMiddleware runs each request
    through a task and memory streams, a fifth of the event loop's time under load."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope["path"]
        policy = DOCS_CSP if path == "/docs" or path.startswith("/docs-assets/") else CSP
        extra = [(b"content-security-policy", policy.encode()), (b"x-content-type-options", b"nosniff"),
                 (b"referrer-policy", b"no-referrer")]
        names = {name for name, _ in extra}

        async def with_headers(message: Dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                kept = [(k, v) for k, v in message.get("headers", []) if k.lower() not in names]
                message = dict(message, headers=kept + extra)
            await send(message)

        return await self.app(scope, receive, with_headers)


class Guard:
    """Before a body is read or a route runs: an /api request needs a token the server knows (401), and
    its body may not exceed the route's limit (413; a body sent in chunks is cut off at the limit).
    FastAPI reads a request's body before it runs the route's dependencies (where the role is
    checked), so without this anyone could make the server parse a gigabyte of JSON or spool an
    endless upload."""

    def __init__(self, app: Any, tokens: Tokens, upload_limit: int) -> None:
        self.app, self.tokens, self.upload_limit = app, tokens, upload_limit

    async def _refuse(self, send: Any, status: int, detail: str, extra: Sequence[tuple] = ()) -> None:
        body = json.dumps({"detail": detail}).encode()
        await send({"type": "http.response.start", "status": status, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *extra]})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: Dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/api/"):
            return await self.app(scope, receive, send)
        headers = dict(scope["headers"])
        scheme, _, token = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
        if scheme.lower() != "bearer" or self.tokens.caller(token.strip()) is None:
            return await self._refuse(send, 401, "a valid token is needed: send 'Authorization: Bearer <token>'.",
                                      [(b"www-authenticate", b"Bearer")])
        limit = self.upload_limit + UPLOAD_OVERHEAD if scope["path"] == "/api/search/image" else MAX_JSON_BYTES
        declared = headers.get(b"content-length", b"").decode("latin-1")
        if declared.isdigit() and int(declared) > limit:
            return await self._refuse(send, 413, f"request body of {declared} bytes is over this route's limit of "
                                                 f"{limit}; send less.")
        seen = 0

        async def bounded() -> Dict[str, Any]:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:  # chunked past the limit: the request ends here, unanswered
                    return {"type": "http.disconnect"}
            return message

        return await self.app(scope, bounded, send)


__all__ = ["CSP", "DOCS_CSP", "Guard", "MAX_JSON_BYTES", "SecurityHeaders", "UPLOAD_OVERHEAD"]
