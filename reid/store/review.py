"""A person's decisions on the machine's links, each logged with what it changed and undoable.

* confirm a link: the tracklet is that person (status "confirmed");
* reject a link: the tracklet is not that person; it leaves the identity for one of its own, and
  the linker never puts it back there (status "rejected");
* split an identity: the given tracklets leave it together, as a new identity;
* merge two identities: every tracklet of the second joins the first, which the second now
  points at (``merged_into``); the merge is a person's link for each tracklet moved;
* undo a decision: the state before it comes back, provided nothing it changed was changed again by
  a later decision (undo that one first); the undo is itself a decision of the log.

Each decision runs in one transaction and writes one ``decisions`` row whose payload holds the
request and, per thing it touched, the value before and after (tracklet -> identity, link ->
status, identity -> merged_into), which is what undo compares and restores.
"""
from __future__ import annotations

import json
import time
from typing import Any, Dict, List, Optional, Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from .records import NotInStore
from .schema import MAX_NAME, Decision, Identity, Link, Tracklet

KINDS = ("confirm", "reject", "split", "merge", "undo")


class ReviewError(ValueError):
    """A decision that cannot be made as asked (named thing missing, undo blocked, ...)."""


class NotFound(ReviewError, NotInStore):
    """A link, identity, tracklet or decision that is not in the store."""


def _who(by: str) -> str:
    if not isinstance(by, str) or len(by) > MAX_NAME:
        raise ReviewError(f"reviewer name must be text of at most {MAX_NAME} characters.")
    return by


def _get(s: Session, table: Any, key: int, what: str) -> Any:
    row = s.get(table, int(key))
    if row is None:
        raise NotFound(f"{what} {key} is not in the store.")
    return row


def _active(s: Session, identity_id: int) -> Identity:
    ident = _get(s, Identity, identity_id, "identity")
    if ident.merged_into is not None:
        raise ReviewError(f"identity {identity_id} was merged into {ident.merged_into}; review that one.")
    return ident


class _Changes:
    """Before/after values of what a decision touches."""

    def __init__(self) -> None:
        self.tracklets: Dict[str, List[Optional[int]]] = {}
        self.links: Dict[str, List[Optional[str]]] = {}
        self.identities: Dict[str, List[Optional[int]]] = {}

    def move(self, t: Tracklet, identity_id: int) -> None:
        self.tracklets.setdefault(str(t.id), [t.identity_id, None])[1] = identity_id
        t.identity_id = identity_id

    def status(self, link: Link, status: str) -> None:
        self.links.setdefault(str(link.id), [link.status, None])[1] = status
        link.status = status

    def merged(self, ident: Identity, into: Optional[int]) -> None:
        self.identities.setdefault(str(ident.id), [ident.merged_into, None])[1] = into
        ident.merged_into = into

    def payload(self, request: Dict[str, Any]) -> str:
        return json.dumps({"request": request, "tracklets": self.tracklets, "links": self.links,
                           "identities": self.identities})


def _log(s: Session, kind: str, changes: _Changes, request: Dict[str, Any], by: str,
         undoes: Optional[int] = None) -> Dict[str, Any]:
    d = Decision(kind=kind, payload=changes.payload(request), by_whom=by, undoes=undoes, created=time.time())
    s.add(d)
    s.flush()
    return decision_dict(d)


def _new_identity(s: Session) -> Identity:
    ident = Identity(created=time.time())
    s.add(ident)
    s.flush()
    return ident


def _current(s: Session, link: Link) -> Tracklet:
    """The link's tracklet, when it is still in the link's identity; a ReviewError otherwise (a split,
    merge or reject moved it since: the link speaks of a grouping that is gone)."""
    t = _get(s, Tracklet, link.tracklet_id, "tracklet")
    if t.identity_id != link.identity_id:
        raise ReviewError(f"link {link.id} is out of date: tracklet {t.id} has left identity {link.identity_id} "
                          f"(it is in identity {t.identity_id} now); review that identity.")
    return t


def confirm(s: Session, link_id: int, by: str = "") -> Dict[str, Any]:
    """Confirm a proposed link (the tracklet is that person)."""
    link = _get(s, Link, link_id, "link")
    if link.status != "proposed":
        raise ReviewError(f"link {link_id} is {link.status}, not proposed.")
    _current(s, link)
    changes = _Changes()
    changes.status(link, "confirmed")
    return _log(s, "confirm", changes, {"link": link_id}, _who(by))


def reject(s: Session, link_id: int, by: str = "") -> Dict[str, Any]:
    """Reject a link: its tracklet leaves the identity for a new one of its own."""
    link = _get(s, Link, link_id, "link")
    if link.status == "rejected":
        raise ReviewError(f"link {link_id} is already rejected.")
    t = _current(s, link)
    changes = _Changes()
    changes.status(link, "rejected")
    changes.move(t, _new_identity(s).id)
    return _log(s, "reject", changes, {"link": link_id}, _who(by))


def split(s: Session, identity_id: int, tracklet_ids: Sequence[int], by: str = "") -> Dict[str, Any]:
    """Move the given tracklets of an identity to a new identity."""
    _active(s, identity_id)
    ids = sorted({int(t) for t in tracklet_ids})
    members = set(s.scalars(select(Tracklet.id).where(Tracklet.identity_id == identity_id)))
    if not ids:
        raise ReviewError("split needs at least one tracklet.")
    outside = [t for t in ids if t not in members]
    if outside:
        raise ReviewError(f"tracklet {outside[0]} is not in identity {identity_id}.")
    if set(ids) == members:
        raise ReviewError(f"split would move every tracklet of identity {identity_id}; leave at least one.")
    changes = _Changes()
    fresh = _new_identity(s)
    for t in s.scalars(select(Tracklet).where(Tracklet.id.in_(ids))):
        changes.move(t, fresh.id)
    return _log(s, "split", changes, {"identity": identity_id, "tracklets": ids, "new_identity": fresh.id},
                _who(by)) | {"new_identity": fresh.id}


def merge(s: Session, keep: int, other: int, by: str = "") -> Dict[str, Any]:
    """Move every tracklet of identity `other` into `keep`."""
    if int(keep) == int(other):
        raise ReviewError(f"identity {keep} cannot be merged with itself.")
    _active(s, keep)
    gone = _active(s, other)
    changes = _Changes()
    now = time.time()
    moved = s.scalars(select(Tracklet).where(Tracklet.identity_id == other)).all()
    for t in moved:
        changes.move(t, int(keep))
    s.flush()
    added = []
    for t in moved:
        link = Link(tracklet_id=t.id, identity_id=int(keep), score=None, made_by="person", by_whom=_who(by),
                    status="confirmed", created=now)
        s.add(link)
        added.append(link)
    s.flush()
    for link in added:
        changes.links[str(link.id)] = [None, "confirmed"]
    changes.merged(gone, int(keep))
    return _log(s, "merge", changes, {"keep": int(keep), "other": int(other)}, _who(by))


def _later(s: Session, after: int, table: str, key: str) -> str:
    """" (decision N)" naming the latest decision after `after` that changed `table`'s `key` (what an undo
    must wait for), or "" when the log does not show one (a linker's change)."""
    for d in s.scalars(select(Decision).where(Decision.id > after).order_by(Decision.id.desc()).limit(10000)):
        if key in json.loads(d.payload).get(table, {}):
            return f" (decision {d.id}, {d.kind})"
    return ""


def undo(s: Session, decision_id: int, by: str = "") -> Dict[str, Any]:
    """Undo a decision (module docstring)."""
    d = _get(s, Decision, decision_id, "decision")
    if d.kind == "undo":
        raise ReviewError(f"decision {decision_id} is an undo; make the decision again instead.")
    if s.scalar(select(Decision.id).where(Decision.undoes == d.id)) is not None:
        raise ReviewError(f"decision {decision_id} is already undone.")
    payload = json.loads(d.payload)
    changes = _Changes()
    undone_merges = {int(k): before for k, (before, _) in payload["identities"].items()}
    for key, (before, after) in payload["tracklets"].items():
        t = _get(s, Tracklet, int(key), "tracklet")
        if t.identity_id != after:
            raise ReviewError(f"a later decision{_later(s, d.id, 'tracklets', key)} moved tracklet {key} (now in "
                              f"identity {t.identity_id}); undo that one first.")
        target = _get(s, Identity, before, "identity")
        merged = undone_merges.get(before, target.merged_into)
        if merged is not None:  # putting it back would hide it in an identity that no longer shows
            raise ReviewError(f"identity {before} was merged into {target.merged_into} by a later decision"
                              f"{_later(s, d.id, 'identities', str(before))}; undo that one first.")
        changes.move(t, before)
    for key, (before, after) in payload["links"].items():
        link = _get(s, Link, int(key), "link")
        if link.status != after:
            raise ReviewError(f"a later decision{_later(s, d.id, 'links', key)} changed link {key} (now "
                              f"{link.status}); undo that one first.")
        # a link this decision made is withdrawn (kept for the log), not rejected: nobody said "not this person"
        changes.status(link, "withdrawn" if before is None else before)
    for key, (before, after) in payload["identities"].items():
        ident = _get(s, Identity, int(key), "identity")
        if ident.merged_into != after:
            raise ReviewError(f"a later decision{_later(s, d.id, 'identities', key)} changed identity {key}; "
                              "undo that one first.")
        changes.merged(ident, before)
    return _log(s, "undo", changes, {"decision": decision_id}, _who(by), undoes=d.id)


def decision_dict(d: Decision) -> Dict[str, Any]:
    """A decision as the API returns it."""
    return {"id": d.id, "kind": d.kind, "by": d.by_whom, "created": d.created, "undoes": d.undoes,
            "payload": json.loads(d.payload)}


def decisions(s: Session, limit: int = 50, before: Optional[int] = None) -> List[Dict[str, Any]]:
    """The latest decisions, newest first (`before`: only ids below it, for paging)."""
    q = select(Decision).order_by(Decision.id.desc()).limit(int(limit))
    if before is not None:
        q = q.where(Decision.id < int(before))
    return [decision_dict(d) for d in s.scalars(q)]


__all__ = ["KINDS", "NotFound", "ReviewError", "confirm", "decision_dict", "decisions", "merge", "reject", "split",
           "undo"]
