"""The tables of the sightings store (SQLAlchemy 2; the same schema on SQLite and PostgreSQL).

The database is the truth: every vector index is rebuilt from ``features`` when it disagrees.

* ``cameras``: the user's camera numbers (as ``seqinfo.ini camera=`` or a crop name gives them).
* ``models``: one appearance model per name, with the weights identity galleries record and its
  decision threshold (cosine similarity; two sightings at or above it are taken as one person).
* ``tracklets``: one person in one camera over a time span; every sighting belongs to one, and
  every tracklet to one identity (its own until linked).
* ``sightings``: one box of a tracklet at one time, with its crop (a file the store owns, named
  by its SHA-256).
* ``features`` / ``tracklet_features``: vectors per model (float32 bytes, L2-normalised);
  ``features.id`` is the order rows enter the model's vector index.
* ``identities``: people; a merged one points at the identity it went into.
* ``links``: why a tracklet is in an identity: made by the linker (with its score) or by a person;
  proposed, confirmed or rejected (a rejected pair is never linked again by the machine).
* ``decisions``: the append-only log of what people decided, each with what it changed, so that
  any decision can be undone by a later one.

Times are seconds since 1970-01-01 UTC (float); ``source`` columns are the keys that make an
ingest idempotent (the same input gives the same keys, which are unique).
"""
from __future__ import annotations

from typing import Optional

from sqlalchemy import Double, ForeignKey, Index, Integer, LargeBinary, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

#: Bumped when a table changes; a store written by another version is refused with one line.
SCHEMA_VERSION = 1
#: Longest source key / name kept (PostgreSQL VARCHAR; SQLite does not enforce it, ingest does).
MAX_KEY = 500
MAX_NAME = 200
#: Who made a link, and its states ("withdrawn": a link a person made, then undone).
MADE_BY = ("linker", "person")
LINK_STATES = ("proposed", "confirmed", "rejected", "withdrawn")


class Base(DeclarativeBase):
    """The store's tables."""


class Meta(Base):
    """Key-value facts about the store itself (schema version, when created)."""

    __tablename__ = "store_meta"
    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


class Camera(Base):
    """A camera, numbered as the user numbers it."""

    __tablename__ = "cameras"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    name: Mapped[str] = mapped_column(String(MAX_NAME), default="")


class Model(Base):
    """An appearance model whose features the store keeps."""

    __tablename__ = "models"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(MAX_NAME), unique=True)
    identity: Mapped[str] = mapped_column(Text)  # JSON: the weights identity (hashes, backend)
    dim: Mapped[int] = mapped_column(Integer)
    threshold: Mapped[Optional[float]] = mapped_column(Double, nullable=True)  # cosine similarity
    threshold_source: Mapped[str] = mapped_column(Text, default="")
    created: Mapped[float] = mapped_column(Double)


class Identity(Base):
    """A person (as far as the linker and the reviewers know)."""

    __tablename__ = "identities"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    created: Mapped[float] = mapped_column(Double)
    merged_into: Mapped[Optional[int]] = mapped_column(ForeignKey("identities.id"), nullable=True)


class Tracklet(Base):
    """One person in one camera over a time span."""

    __tablename__ = "tracklets"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    camera_id: Mapped[int] = mapped_column(ForeignKey("cameras.id"))
    source: Mapped[str] = mapped_column(String(MAX_KEY), unique=True)
    start: Mapped[float] = mapped_column(Double)
    end: Mapped[float] = mapped_column(Double)
    identity_id: Mapped[int] = mapped_column(ForeignKey("identities.id"), index=True)
    created: Mapped[float] = mapped_column(Double)
    __table_args__ = (Index("ix_tracklets_camera_time", "camera_id", "start"),)


class Sighting(Base):
    """One box of a tracklet: where, when, and its crop file."""

    __tablename__ = "sightings"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    tracklet_id: Mapped[int] = mapped_column(ForeignKey("tracklets.id"), index=True)
    camera_id: Mapped[int] = mapped_column(ForeignKey("cameras.id"))
    time: Mapped[float] = mapped_column(Double)
    frame: Mapped[Optional[int]] = mapped_column(Integer, nullable=True)
    x: Mapped[float] = mapped_column(Double)
    y: Mapped[float] = mapped_column(Double)
    w: Mapped[float] = mapped_column(Double)
    h: Mapped[float] = mapped_column(Double)
    crop: Mapped[str] = mapped_column(String(64))  # SHA-256 hex of the crop file's bytes
    source: Mapped[str] = mapped_column(String(MAX_KEY), unique=True)
    created: Mapped[float] = mapped_column(Double)
    __table_args__ = (Index("ix_sightings_camera_time", "camera_id", "time"),)


class Feature(Base):
    """A sighting's feature under one model."""

    __tablename__ = "features"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    sighting_id: Mapped[int] = mapped_column(ForeignKey("sightings.id"))
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id"))
    vector: Mapped[bytes] = mapped_column(LargeBinary)
    __table_args__ = (UniqueConstraint("sighting_id", "model_id", name="uq_feature_sighting_model"),
                      Index("ix_features_model", "model_id", "id"))


class TrackletFeature(Base):
    """A tracklet's pooled feature under one model (what the linker compares)."""

    __tablename__ = "tracklet_features"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    tracklet_id: Mapped[int] = mapped_column(ForeignKey("tracklets.id"))
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id"))
    vector: Mapped[bytes] = mapped_column(LargeBinary)
    __table_args__ = (UniqueConstraint("tracklet_id", "model_id", name="uq_tracklet_feature_model"),)


class Link(Base):
    """Why a tracklet is (or is not) in an identity."""

    __tablename__ = "links"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    tracklet_id: Mapped[int] = mapped_column(ForeignKey("tracklets.id"), index=True)
    identity_id: Mapped[int] = mapped_column(ForeignKey("identities.id"), index=True)
    score: Mapped[Optional[float]] = mapped_column(Double, nullable=True)  # the linker's cosine similarity
    made_by: Mapped[str] = mapped_column(String(16))  # MADE_BY
    by_whom: Mapped[str] = mapped_column(String(MAX_NAME), default="")
    status: Mapped[str] = mapped_column(String(16))  # LINK_STATES
    created: Mapped[float] = mapped_column(Double)


class Decision(Base):
    """One entry of the append-only log of people's decisions."""

    __tablename__ = "decisions"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(String(32))
    payload: Mapped[str] = mapped_column(Text)  # JSON: what was asked and the state before and after
    by_whom: Mapped[str] = mapped_column(String(MAX_NAME), default="")
    undoes: Mapped[Optional[int]] = mapped_column(ForeignKey("decisions.id"), nullable=True, unique=True)
    created: Mapped[float] = mapped_column(Double)


__all__ = ["Base", "Camera", "Decision", "Feature", "Identity", "LINK_STATES", "Link", "MADE_BY", "MAX_KEY",
           "MAX_NAME", "Meta", "Model", "SCHEMA_VERSION", "Sighting", "Tracklet", "TrackletFeature"]
