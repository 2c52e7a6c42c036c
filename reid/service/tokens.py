"""Access tokens of the service: each with a name and a role, kept hashed in ``<store>/tokens.json``.

Roles: ``read`` (search, look) and ``review`` (read, and confirm / reject / split / merge / undo /
export). A request names its token in ``Authorization: Bearer <token>``. The file holds only the
SHA-256 of each token, so reading it does not give access; a token is shown once, when made
(``tools/serve.py`` makes a review token on first start and prints it).
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from dataclasses import dataclass
from typing import Dict, List, Optional

from reid.utils.file_io import atomic_write_text

ROLES = ("read", "review")
TOKENS_FILE = "tokens.json"
#: Longest token name (it is the reviewer's name in the decision log).
MAX_TOKEN_NAME = 64


@dataclass(frozen=True)
class Caller:
    """Who a request comes from."""

    name: str
    role: str

    def may(self, role: str) -> bool:
        """Whether the caller's role includes `role` (review includes read)."""
        return ROLES.index(self.role) >= ROLES.index(role)


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


class Tokens:
    """The token file of a store."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.entries: List[Dict[str, str]] = []
        self._stamp: Optional[tuple] = None
        self._load()

    def _load(self) -> None:
        """Read the file (again): a token made or removed while a server runs counts from its next request."""
        path = self.path
        stamp, entries = self._file_stamp(), []
        if os.path.isfile(path):
            try:
                with open(path, encoding="utf-8") as f:
                    record = json.load(f)
                entries = [dict(name=str(e["name"]), role=str(e["role"]), sha256=str(e["sha256"]))
                           for e in record["tokens"]]
            except (ValueError, KeyError, TypeError):
                raise ValueError(f"{path} is damaged; remove it and start the server again for a new token.") from None
            bad = [e["role"] for e in entries if e["role"] not in ROLES]
            if bad:
                raise ValueError(f"{path}: role {bad[0]!r} is not one of {', '.join(ROLES)}; correct or remove it.")
        self.entries, self._stamp = entries, stamp

    def __len__(self) -> int:
        return len(self.entries)

    def add(self, name: str, role: str) -> str:
        """A new token for `name` with `role`, saved (hashed); returns the token (shown once)."""
        if role not in ROLES:
            raise ValueError(f"role {role!r} is not one of {', '.join(ROLES)}.")
        if not name or len(name) > MAX_TOKEN_NAME or not name.isprintable():
            raise ValueError(f"token name {name[:80]!r} must be 1..{MAX_TOKEN_NAME} printable characters.")
        self._load()  # another process may have added one since
        if any(e["name"] == name for e in self.entries):
            raise ValueError(f"a token named {name!r} exists in {self.path}; choose another name.")
        token = secrets.token_urlsafe(32)
        self.entries.append({"name": name, "role": role, "sha256": _digest(token)})
        atomic_write_text(self.path, json.dumps({"tokens": self.entries}, indent=1))
        os.chmod(self.path, 0o600)
        self._stamp = self._file_stamp()
        return token

    def _file_stamp(self) -> Optional[tuple]:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def caller(self, token: Optional[str]) -> Optional[Caller]:
        """The caller a token belongs to, or None (compared in constant time). The file is read again when
        it changed since it was last read (tools/serve.py --new-token, a token deleted by hand)."""
        if not token:
            return None
        if self._file_stamp() != self._stamp:
            try:
                self._load()
            except ValueError:  # a file being edited by hand: keep the tokens known so far
                pass
        digest = _digest(token)
        for e in self.entries:
            if hmac.compare_digest(e["sha256"], digest):
                return Caller(e["name"], e["role"])
        return None


def store_tokens(folder: str) -> Tokens:
    """The tokens of the store in `folder`."""
    return Tokens(os.path.join(folder, TOKENS_FILE))


__all__ = ["Caller", "MAX_TOKEN_NAME", "ROLES", "TOKENS_FILE", "Tokens", "store_tokens"]
