"""The shapes of the API's answers and bodies (pydantic models: they make the OpenAPI schema and check
every answer against it), and the refusals each route declares."""
from __future__ import annotations

from typing import Annotated, Any, Dict, List, Optional, Union

from pydantic import BaseModel, Field

#: Largest row id: the id columns are INTEGER, 32 bits on PostgreSQL (a larger number is not an id there,
#: and would reach the database as an error, not a 404).
MAX_ID = 2**31 - 1
#: A row id as a body field.
RowId = Annotated[int, Field(ge=1, le=MAX_ID)]


class SightingOut(BaseModel):
    id: int
    camera: int
    time: float
    frame: Optional[int] = None
    box: List[float]
    crop: str
    tracklet: int
    identity: Optional[int] = None
    score: Optional[float] = None


class SearchOut(BaseModel):
    model: str
    threshold: Optional[float] = Field(None, description="cosine similarity at or above which two crops are one person")
    threshold_source: str = ""
    results: List[SightingOut]


class TrackletOut(BaseModel):
    id: int
    camera: int
    start: float
    end: float
    identity: int
    source: str


class LinkOut(BaseModel):
    id: int
    tracklet: int
    identity: int
    score: Optional[float] = None
    made_by: str
    by: str
    status: str
    created: float


class CameraSightings(BaseModel):
    camera: int
    sightings: List[SightingOut]


class IdentityOut(BaseModel):
    id: int
    merged_into: Optional[int] = None
    created: float
    tracklets: List[TrackletOut]
    cameras: List[CameraSightings]
    links: List[LinkOut]


class IdentitySummary(BaseModel):
    id: int
    cameras: List[int]
    tracklets: int
    sightings: int
    start: Optional[float] = None
    end: Optional[float] = None
    sighting: Optional[int] = None
    crop: Optional[str] = None


class PendingLink(BaseModel):
    id: int
    tracklet: int
    identity: int
    score: Optional[float] = None
    status: str
    made_by: str
    camera: int
    start: float
    end: float
    crop: Optional[str] = None
    identity_crop: Optional[str] = None
    identity_camera: Optional[int] = None


class DecisionOut(BaseModel):
    id: int
    kind: str
    by: str
    created: float
    undoes: Optional[int] = None
    payload: Dict[str, Any]
    new_identity: Optional[int] = None


class SplitIn(BaseModel):
    tracklets: List[RowId] = Field(min_length=1, max_length=10000)


class MergeIn(BaseModel):
    keep: int = Field(ge=1, le=MAX_ID)
    other: int = Field(ge=1, le=MAX_ID)


class ModelOut(BaseModel):
    name: str
    dim: int
    threshold: Optional[float] = None
    threshold_source: str
    can_embed: bool


class MeOut(BaseModel):
    name: str
    role: str


class HealthOut(BaseModel):
    counts: Dict[str, int]
    models: List[ModelOut]
    vectors: Dict[str, Any]


class ExportIn(BaseModel):
    test_fraction: float = Field(0.2, ge=0, lt=1, description="share of the identities seen by 2+ cameras held out for testing")
    seed: int = Field(0, ge=0, le=2**31)


class ExportOut(BaseModel):
    folder: str
    identities: int
    test_identities: int
    images: Dict[str, int]
    by: str


class ErrorOut(BaseModel):
    detail: str = Field(description="why, in one line")


#: What each refusal means (module docstring); every refusal has the body ErrorOut.
REFUSALS = {400: "a body that cannot be read at all (bytes that are not text, broken multipart)",
            401: "no token, or one this server does not know", 403: "the token's role may not do this",
            404: "not in the store", 409: "a decision that cannot be made now", 413: "upload too large",
            415: "upload is not an image", 422: "a parameter or body that is not valid", 503: "the database is busy: try again"}


def refusals(*codes: int) -> Dict[Union[int, str], Dict[str, Any]]:
    """The `responses=` of a route for the refusals `codes` (401 and 422 are every route's: app-wide)."""
    return {code: {"model": ErrorOut, "description": REFUSALS[code]} for code in codes}


__all__ = [name for name in dir() if name.endswith(("Out", "In")) or name in ("MAX_ID", "REFUSALS", "refusals")]
