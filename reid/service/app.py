"""The HTTP API and the review page of a store (FastAPI; OpenAPI docs at /docs).

    app = create_app(store, tokens, embed=model.embed, model_name="demo")
    uvicorn.run(app, host="127.0.0.1", port=8000)        # tools/serve.py does this

Every route under /api needs a token (``Authorization: Bearer <token>``; reid/service/tokens.py):
reading needs the read role, changing anything the review role. Errors are one line in
``{"detail": ...}`` with the status that says why (400 a body that cannot be parsed, 401 no or
unknown token, 403 role, 404 not in the store, 409 a decision that cannot be made now, 413 / 415
an upload refused, 422 a bad parameter); each route's OpenAPI entry declares those it gives.
Every write is one transaction (reid/store/review.py). Crops are served by their name only, and
only when a sighting names them. The page (reid/service/static/) loads nothing from another host:
the Content-Security-Policy forbids it.
"""
from __future__ import annotations

import importlib.util
import os
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np
from fastapi import Body, Depends, FastAPI, File, HTTPException, Path, Query, Request, UploadFile
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.staticfiles import StaticFiles
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError, OperationalError
from starlette.middleware.trustedhost import TrustedHostMiddleware

from reid.store import review
from reid.store.crops import CropError, check_crop_name
from reid.store.export import calibrate_reviewed, export_reviewed
from reid.store.queries import list_identities, pending_links
from reid.store.schema import Sighting
from reid.store.store import Store

from .guard import CSP, DOCS_CSP, MAX_JSON_BYTES, Guard, SecurityHeaders
from .params import MAX_K, check_window, parse_cameras, parse_time
from .schemas import (MAX_ID, DecisionOut, ExportIn, ExportOut, HealthOut, IdentityOut, IdentitySummary, MeOut,
                      MergeIn, ModelOut, PendingLink, SearchOut, SightingOut, SplitIn, refusals)
from .tokens import Caller, Tokens
from .uploads import MAX_UPLOAD_BYTES, UploadError, decode_upload

STATIC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")
Embed = Callable[[List[np.ndarray]], np.ndarray]


def ID() -> Any:
    """A fresh id path parameter (FastAPI binds a parameter object to the first name it meets)."""
    return Path(ge=1, le=MAX_ID)


def _validation_line(exc: RequestValidationError) -> str:
    """The first problem of a request FastAPI refused, as one line naming the parameter (never
    echoing the value sent)."""
    errors = exc.errors()
    if not errors:
        return "the request is not valid."
    first = errors[0]
    where = ".".join(str(p) for p in first.get("loc", ()) if p not in ("query", "path", "body", "header"))
    message = str(first.get("msg", "is not valid")).splitlines()[0]
    return f"{where or 'request'}: {message}"


def swagger_assets() -> Optional[str]:
    """The folder of Swagger UI's files (the fastapi-offline package carries Swagger UI 5, which reads the
    OpenAPI 3.1 schemas FastAPI writes), or None when it is not installed: the API docs page is served from
    here, never from a CDN."""
    spec = importlib.util.find_spec("fastapi_offline")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = os.path.join(list(spec.submodule_search_locations)[0], "static")
    return folder if os.path.isfile(os.path.join(folder, "swagger-ui-bundle.js")) else None


#: Reads the bearer token and declares the scheme in the OpenAPI schema (the docs page's Authorize button).
BEARER = HTTPBearer(auto_error=False, description="a token of tools/serve.py (roles read, review)")


def _bad(e: Exception, status: int = 422) -> HTTPException:
    return HTTPException(status_code=status, detail=str(e).splitlines()[0] if str(e) else type(e).__name__)


def create_app(store: Store, tokens: Tokens, embed: Optional[Embed] = None, model_name: Optional[str] = None,
               max_upload_bytes: int = MAX_UPLOAD_BYTES, allowed_hosts: Optional[Sequence[str]] = None) -> FastAPI:
    """The service of `store` (module docstring). `embed` turns RGB crops into features of the model
    `model_name` (search by upload needs it; without it only search by sighting works).
    `allowed_hosts`: the Host header values answered (None: any; tools/serve.py gives the loopback names
    when it binds to the loopback, against DNS rebinding)."""
    app = FastAPI(title="circle-reid store", version="1",
                  description="Search the sightings of a re-ID store by image or sighting, and review the links "
                              "the machine made. Every /api route needs `Authorization: Bearer <token>`.",
                  responses=refusals(401, 422), docs_url=None, redoc_url=None)
    # the last added runs first: Host check, then the guard, every answer (refusals too) with the headers
    app.add_middleware(Guard, tokens=tokens, upload_limit=max_upload_bytes)
    if allowed_hosts:  # a page elsewhere cannot reach a loopback server by a name it resolves to 127.0.0.1
        app.add_middleware(TrustedHostMiddleware, allowed_hosts=list(allowed_hosts))
    app.add_middleware(SecurityHeaders)

    @app.exception_handler(RequestValidationError)
    async def one_line(_: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": _validation_line(exc)}, status_code=422)

    def caller(credentials: Optional[HTTPAuthorizationCredentials] = Depends(BEARER)) -> Caller:
        who = tokens.caller(credentials.credentials.strip()) if credentials is not None else None
        if who is None:
            raise HTTPException(401, "a valid token is needed: send 'Authorization: Bearer <token>'.",
                                headers={"WWW-Authenticate": "Bearer"})
        return who

    def reader(who: Caller = Depends(caller)) -> Caller:
        return who

    def reviewer(who: Caller = Depends(caller)) -> Caller:
        if not who.may("review"):
            raise HTTPException(403, f"token {who.name!r} may read only; reviewing needs a review token.")
        return who

    def model_of(name: Optional[str]):
        try:
            return store.model(name or model_name)
        except KeyError as e:
            raise HTTPException(404, str(e.args[0])) from None

    def filters(cameras: Optional[str], start: Optional[str], end: Optional[str]):
        try:
            cams, t0, t1 = parse_cameras(cameras), parse_time(start, "start"), parse_time(end, "end")
            check_window(t0, t1)
        except ValueError as e:
            raise _bad(e) from None
        return cams, t0, t1

    def answer(model, vector, k, cams, t0, t1, exclude=None) -> Dict[str, Any]:
        results = store.search(model.name, vector, k, cams, t0, t1, exclude_sighting=exclude)
        return {"model": model.name, "threshold": model.threshold, "threshold_source": model.threshold_source,
                "results": results}

    def Cameras() -> Any:
        return Query(None, max_length=12000, description="camera numbers, comma-separated (default: all)")
    def Start() -> Any:
        return Query(None, max_length=40, description="from this time: epoch seconds or ISO-8601")
    def End() -> Any:
        return Query(None, max_length=40, description="until this time: epoch seconds or ISO-8601")
    def K() -> Any:
        return Query(10, ge=1, le=MAX_K, description="number of results")
    def ModelName() -> Any:
        return Query(None, max_length=200, description="model (default: the server's)")

    @app.get("/api/me", response_model=MeOut, summary="The caller's token name and role")
    def me(who: Caller = Depends(reader)) -> Dict[str, str]:
        return {"name": who.name, "role": who.role}

    @app.get("/api/health", response_model=HealthOut, summary="Rows, models and vector indexes")
    def health(_: Caller = Depends(reader)) -> Dict[str, Any]:
        return {"counts": store.counts(), "models": models(_), "vectors": store.vectors_info()}

    @app.get("/api/models", response_model=List[ModelOut], summary="The models of the store")
    def models(_: Caller = Depends(reader)) -> List[Dict[str, Any]]:
        served = model_name or (store.models()[0].name if len(store.models()) == 1 else None)
        return [{"name": m.name, "dim": m.dim, "threshold": m.threshold, "threshold_source": m.threshold_source,
                 "can_embed": embed is not None and m.name == served} for m in store.models()]

    @app.post("/api/search/image", response_model=SearchOut, summary="Search by an uploaded image",
              responses=refusals(400, 404, 409, 413, 415))
    def search_image(image: UploadFile = File(..., description="a person crop (JPEG/PNG)"),
                     k: int = K(), cameras: Optional[str] = Cameras(), start: Optional[str] = Start(),
                     end: Optional[str] = End(), model: Optional[str] = ModelName(),
                     _: Caller = Depends(reader)) -> Dict[str, Any]:
        # a plain def: FastAPI runs it in its thread pool, so decoding, the model and the search never
        # hold up the event loop (other requests)
        m = model_of(model)
        if embed is None or (model_name is not None and m.name != model_name):
            raise HTTPException(409, f"this server runs no model for {m.name!r}; search by sighting, or start "
                                     "tools/serve.py with the model (--run / --weights).")
        cams, t0, t1 = filters(cameras, start, end)
        data = image.file.read(max_upload_bytes + 1)
        try:
            rgb = decode_upload(data, max_upload_bytes)
        except UploadError as e:
            raise _bad(e, e.status) from None
        vector = np.asarray(embed([rgb]), np.float32)[0]
        return answer(m, vector, k, cams, t0, t1)

    @app.get("/api/search/sighting/{sighting_id}", response_model=SearchOut, summary="Search by a stored sighting",
             responses=refusals(404))
    def search_sighting(sighting_id: int = ID(), k: int = K(), cameras: Optional[str] = Cameras(),
                        start: Optional[str] = Start(), end: Optional[str] = End(), model: Optional[str] = ModelName(),
                        _: Caller = Depends(reader)) -> Dict[str, Any]:
        m = model_of(model)
        cams, t0, t1 = filters(cameras, start, end)
        try:
            vector = store.sighting_vector(m.name, sighting_id)
        except KeyError as e:
            raise HTTPException(404, str(e.args[0])) from None
        return answer(m, vector, k, cams, t0, t1, exclude=sighting_id)

    @app.get("/api/sightings/{sighting_id}", response_model=SightingOut, summary="One sighting",
             responses=refusals(404))
    def sighting(sighting_id: int = ID(), _: Caller = Depends(reader)) -> Dict[str, Any]:
        found = store.sightings([sighting_id])
        if sighting_id not in found:
            raise HTTPException(404, f"sighting {sighting_id} is not in the store.")
        return found[sighting_id]

    @app.get("/api/crops/{name}", summary="A crop (JPEG) by its name", response_class=Response,
             responses={200: {"content": {"image/jpeg": {}}}, **refusals(404)})
    def crop(name: str = Path(max_length=64), _: Caller = Depends(reader)) -> Response:
        try:
            check_crop_name(name)
        except CropError as e:
            raise _bad(e, 404) from None
        with store.session() as s:
            known = s.scalar(select(Sighting.id).where(Sighting.crop == name).limit(1))
        if known is None:
            raise HTTPException(404, f"crop {name} is not in the store.")
        path = store.crops.path(name)
        if not os.path.isfile(path):  # a row whose file is elsewhere: another writer's folder
            raise HTTPException(404, f"crop {name} is named by a sighting, but its file is not in the store's folder "
                                     f"{store.crops.folder}; every writer must use the same folder.")
        return FileResponse(path, media_type="image/jpeg",
                            headers={"Cache-Control": "private, max-age=86400, immutable"})

    @app.get("/api/identities", response_model=List[IdentitySummary], summary="Identities, most cameras first")
    def identities(limit: int = Query(50, ge=1, le=500), offset: int = Query(0, ge=0, le=2**31),
                   min_cameras: int = Query(1, ge=1, le=1000), _: Caller = Depends(reader)) -> List[Dict[str, Any]]:
        with store.session() as s:
            return list_identities(s, limit, offset, min_cameras)

    @app.get("/api/identities/{identity_id}", response_model=IdentityOut, summary="An identity's sightings per camera",
             responses=refusals(404))
    def identity(identity_id: int = ID(), _: Caller = Depends(reader)) -> Dict[str, Any]:
        try:
            return store.identity(identity_id)
        except KeyError as e:
            raise HTTPException(404, str(e.args[0])) from None

    @app.get("/api/links", response_model=List[PendingLink], summary="Links by status (the review queue)",
             responses=refusals(404))
    def links(status: str = Query("proposed", pattern="^(proposed|confirmed|rejected|withdrawn)$"),
              limit: int = Query(50, ge=1, le=500),
              after: Optional[int] = Query(None, ge=1, le=MAX_ID,
                                           description="the next page: the id of the last link of this one"),
              _: Caller = Depends(reader)) -> List[Dict[str, Any]]:
        try:
            with store.session() as s:
                return pending_links(s, limit, status, after)
        except KeyError as e:
            raise HTTPException(404, str(e.args[0])) from None

    def decide(action: Callable[..., Dict[str, Any]], *args: Any) -> Dict[str, Any]:
        try:
            with store.writing() as s:  # decisions take turns: each sees the state the one before left
                return action(s, *args)
        except review.NotFound as e:
            raise _bad(e, 404) from None
        except review.ReviewError as e:
            raise _bad(e, 409) from None
        except IntegrityError as e:  # a unique row another writer made first (e.g. one decision undone twice)
            raise HTTPException(409, f"another decision changed this meanwhile ({str(e.orig).splitlines()[0]}); "
                                     "reload and decide again.") from None
        except OperationalError:
            raise HTTPException(503, "the database is busy; try again.", headers={"Retry-After": "1"}) from None

    @app.post("/api/links/{link_id}/confirm", response_model=DecisionOut, summary="Confirm a link",
              responses=refusals(403, 404, 409, 503))
    def confirm(link_id: int = ID(), who: Caller = Depends(reviewer)) -> Dict[str, Any]:
        return decide(review.confirm, link_id, who.name)

    @app.post("/api/links/{link_id}/reject", response_model=DecisionOut, summary="Reject a link",
              responses=refusals(403, 404, 409, 503))
    def reject(link_id: int = ID(), who: Caller = Depends(reviewer)) -> Dict[str, Any]:
        return decide(review.reject, link_id, who.name)

    @app.post("/api/identities/{identity_id}/split", response_model=DecisionOut,
              summary="Move tracklets of an identity to a new one",
              responses=refusals(400, 403, 404, 409, 503))
    def split(identity_id: int = ID(), body: SplitIn = Body(...), who: Caller = Depends(reviewer)) -> Dict[str, Any]:
        return decide(review.split, identity_id, body.tracklets, who.name)

    @app.post("/api/identities/merge", response_model=DecisionOut, summary="Merge one identity into another",
              responses=refusals(400, 403, 404, 409, 503))
    def merge(body: MergeIn, who: Caller = Depends(reviewer)) -> Dict[str, Any]:
        return decide(review.merge, body.keep, body.other, who.name)

    @app.post("/api/decisions/{decision_id}/undo", response_model=DecisionOut, summary="Undo a decision",
              responses=refusals(403, 404, 409, 503))
    def undo(decision_id: int = ID(), who: Caller = Depends(reviewer)) -> Dict[str, Any]:
        return decide(review.undo, decision_id, who.name)

    @app.get("/api/decisions", response_model=List[DecisionOut], summary="The decision log, newest first")
    def decisions(limit: int = Query(50, ge=1, le=500), before: Optional[int] = Query(None, ge=1, le=MAX_ID),
                  _: Caller = Depends(reader)) -> List[Dict[str, Any]]:
        with store.session() as s:
            return review.decisions(s, limit, before)

    @app.post("/api/exports", response_model=ExportOut, summary="Export the reviewed identities as training data",
              responses=refusals(400, 403, 409))
    def export(body: ExportIn = Body(default_factory=ExportIn), who: Caller = Depends(reviewer)) -> Dict[str, Any]:
        # the folder is the server's choice, under the store: no path from a request reaches the file system
        folder = os.path.join(store.folder, "exports", time.strftime("%Y%m%d-%H%M%S") + f"-{time.time_ns() % 10**9:09d}")
        try:
            record = export_reviewed(store, folder, body.test_fraction, body.seed)
        except ValueError as e:
            raise _bad(e, 409) from None
        return {"folder": folder, "identities": record["identities"], "test_identities": record["test_identities"],
                "images": record["images"], "by": who.name}

    @app.post("/api/models/{name}/calibrate", response_model=ModelOut,
              summary="Calibrate the model's threshold on the reviewed identities", responses=refusals(403, 404, 409))
    def calibrate(name: str = Path(max_length=200), far: float = Query(0.01, gt=0, lt=1),
                  _: Caller = Depends(reviewer)) -> Dict[str, Any]:
        m = model_of(name)
        try:
            calibrate_reviewed(store, m.name, far)
        except ValueError as e:
            raise _bad(e, 409) from None
        return next(x for x in models(_) if x["name"] == m.name)

    @app.get("/", include_in_schema=False)
    def page() -> FileResponse:
        return FileResponse(os.path.join(STATIC, "index.html"), media_type="text/html")

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    swagger = swagger_assets()

    @app.get("/docs", include_in_schema=False)
    def docs() -> Response:
        if swagger is None:
            return Response("The API docs page needs the fastapi-offline package (Swagger UI's files): pip install "
                            "\"circle-reid[service]\". The schema is at /openapi.json.", 404, media_type="text/plain")
        return FileResponse(os.path.join(STATIC, "docs.html"), media_type="text/html")

    if swagger is not None:
        app.mount("/docs-assets", StaticFiles(directory=swagger), name="docs-assets")

    return app


__all__ = ["CSP", "DOCS_CSP", "MAX_JSON_BYTES", "STATIC", "create_app"]
