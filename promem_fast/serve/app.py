"""The HTTP API (FastAPI): versioned routes under ``/v1``, OpenAPI at ``/docs`` (Swagger UI shipped in the package,
no CDN), the web page at ``/``.

Every ``/v1`` route depends on :func:`caller`, which turns the presented API key into a tenant; no route reads
a tenant from the path, query or body. A user, memory or job the tenant does not have is a plain 404, the same
whether another tenant has it or nobody does.
"""

from __future__ import annotations

import tempfile
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any

from promem_fast.deps import require
from promem_fast.errors import PromemError
from promem_fast.serve.keys import Caller
from promem_fast.serve.limits import BodyLimit, RateLimiter
from promem_fast.serve.service import NotFound, Service

require("fastapi", "serve")
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query, Request
from fastapi import Path as PathParam
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, PlainTextResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, Field
from starlette.background import BackgroundTask

STATIC = Path(__file__).resolve().parent / "static"
UNAUTHORIZED = {"WWW-Authenticate": "Bearer"}

User = Annotated[str, PathParam(min_length=1, max_length=256, description="the user whose memory is meant")]
NodeId = Annotated[int, PathParam(description="a memory's id")]


class AddSessions(BaseModel):
    """Sessions of one user, in the input format of ``promem extract`` (``user`` may be left out)."""

    sessions: list[dict[str, Any]] = Field(min_length=1, max_length=1000)


class SearchQuery(BaseModel):
    query: str = Field(min_length=1, max_length=4000)
    k: int = Field(default=10, ge=1, le=200)


class Questions(BaseModel):
    questions: list[str] = Field(min_length=1, max_length=64)


_bearer = HTTPBearer(auto_error=False)


def caller(request: Request, bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> Caller:
    """The key's caller (``Authorization: Bearer KEY`` or ``X-API-Key: KEY``); declared as a bearer scheme so the
    OpenAPI page offers to authorize. 401 for a bad key, 429 past the key's rate."""
    key = bearer.credentials if bearer is not None else request.headers.get("x-api-key", "")
    found = request.app.state.service.keys.check(key)
    if found is None:
        raise HTTPException(401, "invalid or missing API key", headers=UNAUTHORIZED)
    limiter: RateLimiter = request.app.state.limiter
    wait = limiter.acquire(found.key_id)
    if wait > 0:
        raise HTTPException(429, "rate limit exceeded", headers={"Retry-After": limiter.retry_after(wait)})
    return found


Who = Annotated[Caller, Depends(caller)]


def create_app(service: Service, *, rate: float = 20.0, burst: int = 40, max_body: int = 8 * 1024 * 1024) -> Any:
    """The ASGI app over ``service``; it starts the service's worker and closes the service on shutdown."""
    limiter = RateLimiter(rate, burst)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> Any:
        service.start()
        try:
            yield
        finally:
            service.close()

    app = FastAPI(title="promem serve", version="1", lifespan=lifespan, docs_url=None, redoc_url=None,
                  description="Verified graph memory for many applications: one engine, one store, per-key tenants.")

    app.state.service = service
    app.state.limiter = limiter
    v1 = APIRouter(prefix="/v1", dependencies=[Depends(caller)])

    @v1.post("/users/{user}/sessions", status_code=202, summary="Queue sessions of a user for extraction")
    def add(body: AddSessions, user: User, who: Who) -> Any:
        job, rejected = service.submit(who.tenant, user, body.sessions)
        if job is None:
            return JSONResponse({"detail": rejected}, status_code=422)
        return {"job_id": job, "accepted": len(body.sessions) - len(rejected), "rejected": rejected}

    @v1.get("/jobs/{job_id}", summary="Progress of a job")
    def job(job_id: Annotated[str, PathParam(max_length=64)], who: Who) -> Any:
        return service.job(who.tenant, job_id)

    @v1.get("/users", summary="Users with memory")
    def users(who: Who) -> Any:
        return {"users": service.users(who.tenant)}

    @v1.get("/users/{user}/memories", summary="All memories of a user")
    def memories(user: User, who: Who,
                 history: Annotated[bool, Query(description="include superseded versions")] = False) -> Any:
        return {"memories": service.memories(who.tenant, user, history=history)}

    @v1.get("/users/{user}/memories/{node_id}", summary="One memory and its versions")
    def memory(node_id: NodeId, user: User, who: Who) -> Any:
        return service.memory(who.tenant, user, node_id)

    @v1.delete("/users/{user}/memories/{node_id}", summary="Delete one memory")
    def delete_memory(node_id: NodeId, user: User, who: Who) -> Any:
        return {"deleted": service.delete(who.tenant, user, node=node_id)}

    @v1.get("/users/{user}/sessions", summary="Sessions stored for a user")
    def sessions(user: User, who: Who) -> Any:
        return {"sessions": service.sessions(who.tenant, user)}

    @v1.delete("/users/{user}/sessions/{session_id}", summary="Delete one session's memory")
    def delete_session(session_id: str, user: User, who: Who) -> Any:
        return {"deleted": service.delete(who.tenant, user, session=session_id)}

    @v1.delete("/users/{user}", summary="Delete all memory of a user")
    def delete_user(user: User, who: Who) -> Any:
        return {"deleted": service.delete(who.tenant, user)}

    @v1.post("/users/{user}/search", summary="Memories nearest a query")
    def search(body: SearchQuery, user: User, who: Who) -> Any:
        return {"hits": service.search(who.tenant, user, body.query, body.k)}

    @v1.post("/users/{user}/answer", summary="Answer questions from a user's memory")
    def answer(body: Questions, user: User, who: Who) -> Any:
        return {"answers": service.answer(who.tenant, user, body.questions)}

    @v1.get("/users/{user}/graph", summary="A user's memory graph as JSON")
    def graph(user: User, who: Who) -> Any:
        return service.graph(who.tenant, user)

    @v1.get("/export", summary="The tenant's whole memory as JSONL")
    def export(who: Who) -> Any:
        with tempfile.NamedTemporaryFile(prefix="promem-export-", suffix=".jsonl", delete=False) as handle:
            target = Path(handle.name)
        try:
            service.export(who.tenant, target)
        except BaseException:  # no response will remove it
            target.unlink(missing_ok=True)
            raise
        return FileResponse(target, media_type="application/x-ndjson", filename="promem-export.jsonl",
                            background=BackgroundTask(target.unlink, missing_ok=True))

    app.include_router(v1)

    @app.get("/healthz", summary="Liveness: the worker runs and the store answers")
    def healthz() -> Any:
        ok = service.worker.alive
        return JSONResponse({"ok": ok, "queue_depth": service.queue.depth()}, status_code=200 if ok else 503)

    @app.get("/metrics", response_class=PlainTextResponse, summary="Prometheus metrics (totals, no tenant labels)")
    def metrics() -> Any:
        return PlainTextResponse(service.metrics.render(), media_type="text/plain; version=0.0.4")

    @app.get("/docs", include_in_schema=False)
    def docs() -> Any:
        """Swagger UI from the files shipped in the package (an on-prem server may have no internet)."""
        return get_swagger_ui_html(openapi_url="/openapi.json", title="promem serve API",
                                   swagger_js_url="/static/swagger/swagger-ui-bundle.js",
                                   swagger_css_url="/static/swagger/swagger-ui.css", swagger_favicon_url="")

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def page() -> Any:
        return HTMLResponse((STATIC / "index.html").read_text(encoding="utf-8"))

    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.exception_handler(NotFound)
    def not_found(request: Request, exc: NotFound) -> JSONResponse:
        return JSONResponse({"detail": "not found"}, status_code=404)

    @app.exception_handler(PromemError)
    def unavailable(request: Request, exc: PromemError) -> JSONResponse:
        """The engine or the store could not serve the request now (stopping, a backend gone, timed out)."""
        return JSONResponse({"detail": str(exc)}, status_code=503)

    @app.middleware("http")
    async def count(request: Request, call_next: Any) -> Any:
        response = await call_next(request)
        service.metrics.request(response.status_code)
        return response

    return BodyLimit(app, max_body)
