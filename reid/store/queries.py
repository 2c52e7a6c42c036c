"""Lists the review page reads: identities with their size and cameras, the links waiting for a person."""
from __future__ import annotations

from typing import Any, Dict, List, Optional

from sqlalchemy import and_, func, or_, select
from sqlalchemy.orm import Session

from .schema import Identity, Link, Sighting, Tracklet

#: Most rows one list returns.
MAX_LIST = 500


def _limit(limit: int) -> int:
    if not 1 <= int(limit) <= MAX_LIST:
        raise ValueError(f"limit {limit} must lie in 1..{MAX_LIST}.")
    return int(limit)


def list_identities(s: Session, limit: int = 50, offset: int = 0, min_cameras: int = 1) -> List[Dict[str, Any]]:
    """Identities that hold tracklets (not merged away), most cameras first, each with its number of
    tracklets and sightings, its cameras, its time span and one sighting to show."""
    limit = _limit(limit)
    cams = func.count(func.distinct(Tracklet.camera_id))
    rows = s.execute(
        select(Tracklet.identity_id, cams, func.count(Tracklet.id), func.min(Tracklet.start), func.max(Tracklet.end))
        .join(Identity, Identity.id == Tracklet.identity_id)
        .where(Identity.merged_into.is_(None))
        .group_by(Tracklet.identity_id)
        .having(cams >= int(min_cameras))
        .order_by(cams.desc(), Tracklet.identity_id)
        .limit(limit).offset(max(0, int(offset)))).all()
    out = []
    for identity_id, n_cams, n_tracklets, start, end in rows:
        cameras = sorted(s.scalars(select(func.distinct(Tracklet.camera_id)).where(Tracklet.identity_id == identity_id)))
        first = s.execute(select(Sighting.id, Sighting.crop).join(Tracklet, Tracklet.id == Sighting.tracklet_id)
                          .where(Tracklet.identity_id == identity_id).order_by(Sighting.time, Sighting.id)
                          .limit(1)).first()
        sightings = s.scalar(select(func.count(Sighting.id)).join(Tracklet, Tracklet.id == Sighting.tracklet_id)
                             .where(Tracklet.identity_id == identity_id))
        out.append({"id": identity_id, "cameras": cameras, "tracklets": n_tracklets, "sightings": int(sightings or 0),
                    "start": start, "end": end, "sighting": first[0] if first else None,
                    "crop": first[1] if first else None})
    return out


def pending_links(s: Session, limit: int = 50, status: str = "proposed",
                  after: Optional[int] = None) -> List[Dict[str, Any]]:
    """Links in `status` (the review queue: proposed ones, least sure first; the others newest first),
    each with its tracklet's camera and time and one crop of the tracklet and one of the rest of its
    identity. `after`: the page that follows the link of that id in this order (the last of a page)."""
    limit = _limit(limit)
    q = select(Link, Tracklet).join(Tracklet, Tracklet.id == Link.tracklet_id).where(Link.status == status)
    if status == "proposed":  # a link whose tracklet a person moved since speaks of a grouping that is gone
        q = q.where(Tracklet.identity_id == Link.identity_id)
        if after is not None:  # by (score, id), the order of the queue: a link decided meanwhile keeps its score
            score = s.scalar(select(Link.score).where(Link.id == int(after)))
            if score is None:
                raise KeyError(f"link {after} is not in the store: give the id of the last link of a page.")
            q = q.where(or_(Link.score > score, and_(Link.score == score, Link.id > int(after))))
        q = q.order_by(Link.score.asc(), Link.id).limit(limit)
    else:
        if after is not None:
            q = q.where(Link.id < int(after))
        q = q.order_by(Link.id.desc()).limit(limit)
    out = []
    for link, t in s.execute(q).all():
        mine = s.execute(select(Sighting.id, Sighting.crop).where(Sighting.tracklet_id == t.id)
                         .order_by(Sighting.time).limit(1)).first()
        other = s.execute(select(Sighting.id, Sighting.crop, Tracklet.camera_id)
                          .join(Tracklet, Tracklet.id == Sighting.tracklet_id)
                          .where(Tracklet.identity_id == link.identity_id, Tracklet.id != t.id)
                          .order_by(Sighting.time).limit(1)).first()
        out.append({"id": link.id, "tracklet": t.id, "identity": link.identity_id, "score": link.score,
                    "status": link.status, "made_by": link.made_by, "camera": t.camera_id, "start": t.start,
                    "end": t.end, "crop": mine[1] if mine else None,
                    "identity_crop": other[1] if other else None, "identity_camera": other[2] if other else None})
    return out


__all__ = ["MAX_LIST", "list_identities", "pending_links"]
