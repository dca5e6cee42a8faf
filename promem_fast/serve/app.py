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
from typing import Any

from promem_fast.backends._deps import require
from promem_fast.serve.keys import Caller
from promem_fast.serve.limits import BodyLimit, RateLimiter
from promem_fast.serve.service import NotFound, Service

require("fastapi", "serve")
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query, Request  # noqa: E402
from fastapi import Path as PathParam  # noqa: E402
from fastapi.openapi.docs import get_swagger_ui_html  # noqa: E402
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, PlainTextResponse  # noqa: E402
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer  # noqa: E402
from fastapi.staticfiles import StaticFiles  # noqa: E402
from pydantic import BaseModel, Field  # noqa: E402
from starlette.background import BackgroundTask  # noqa: E402

STATIC = Path(__file__).resolve().parent / "static"
UNAUTHORIZED = {"WWW-Authenticate": "Bearer"}

User = PathParam(min_length=1, max_length=256, description="the user whose memory is meant")


class AddSessions(BaseModel):
    """Sessions of one user, in the input format of ``promem extract`` (``user`` may be left out)."""

    sessions: list[dict[str, Any]] = Field(min_length=1, max_length=1000)


class SearchQuery(BaseModel):
    query: str = Field(min_length=1, max_length=4000)
    k: int = Field(default=10, ge=1, le=200)


class Questions(BaseModel):
    questions: list[str] = Field(min_length=1, max_length=64)


def create_app(service: Service, *, rate: float = 20.0, burst: int = 40, max_body: int = 8 * 1024 * 1024,
               manage: bool = True) -> Any:
    """The ASGI app over ``service``; with ``manage`` the app starts and stops the service's worker."""
    limiter = RateLimiter(rate, burst)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> Any:
        if manage:
            service.start()
        try:
            yield
        finally:
            if manage:
                service.close()

    app = FastAPI(title="promem serve", version="1", lifespan=lifespan, docs_url=None, redoc_url=None,
                  description="Verified graph memory for many applications: one engine, one store, per-key tenants.")

    def caller(request: Request, bearer: HTTPAuthorizationCredentials | None = Depends(HTTPBearer(auto_error=False))
               ) -> Caller:
        """The key's caller (``Authorization: Bearer KEY`` or ``X-API-Key: KEY``); declared as a bearer scheme so
        the OpenAPI page offers to authorize."""
        key = bearer.credentials if bearer is not None else request.headers.get("x-api-key", "")
        found = service.keys.check(key)
        if found is None:
            raise HTTPException(401, "invalid or missing API key", headers=UNAUTHORIZED)
        wait = limiter.acquire(found.key_id)
        if wait > 0:
            raise HTTPException(429, "rate limit exceeded", headers={"Retry-After": limiter.retry_after(wait)})
        return found

    v1 = APIRouter(prefix="/v1", dependencies=[Depends(caller)])

    @v1.post("/users/{user}/sessions", status_code=202, summary="Queue sessions of a user for extraction")
    def add(body: AddSessions, user: str = User, who: Caller = Depends(caller)) -> Any:
        job, rejected = service.submit(who.tenant, user, body.sessions)
        if job is None:
            return JSONResponse({"detail": rejected}, status_code=422)
        return {"job_id": job, "accepted": len(body.sessions) - len(rejected), "rejected": rejected}

    @v1.get("/jobs/{job_id}", summary="Progress of a job")
    def job(job_id: str = PathParam(max_length=64), who: Caller = Depends(caller)) -> Any:
        return service.job(who.tenant, job_id)

    @v1.get("/users", summary="Users with memory")
    def users(who: Caller = Depends(caller)) -> Any:
        return {"users": service.users(who.tenant)}

    @v1.get("/users/{user}/memories", summary="All memories of a user")
    def memories(user: str = User, history: bool = Query(False, description="include superseded versions"),
                 who: Caller = Depends(caller)) -> Any:
        return {"memories": service.memories(who.tenant, user, history=history)}

    @v1.get("/users/{user}/memories/{node_id}", summary="One memory and its versions")
    def memory(node_id: int, user: str = User, who: Caller = Depends(caller)) -> Any:
        return service.memory(who.tenant, user, node_id)

    @v1.delete("/users/{user}/memories/{node_id}", summary="Delete one memory")
    def delete_memory(node_id: int, user: str = User, who: Caller = Depends(caller)) -> Any:
        return {"deleted": service.delete(who.tenant, user, node=node_id)}

    @v1.get("/users/{user}/sessions", summary="Sessions stored for a user")
    def sessions(user: str = User, who: Caller = Depends(caller)) -> Any:
        return {"sessions": service.sessions(who.tenant, user)}

    @v1.delete("/users/{user}/sessions/{session_id}", summary="Delete one session's memory")
    def delete_session(session_id: str, user: str = User, who: Caller = Depends(caller)) -> Any:
        return {"deleted": service.delete(who.tenant, user, session=session_id)}

    @v1.delete("/users/{user}", summary="Delete all memory of a user")
    def delete_user(user: str = User, who: Caller = Depends(caller)) -> Any:
        return {"deleted": service.delete(who.tenant, user)}

    @v1.post("/users/{user}/search", summary="Memories nearest a query")
    def search(body: SearchQuery, user: str = User, who: Caller = Depends(caller)) -> Any:
        return {"hits": service.search(who.tenant, user, body.query, body.k)}

    @v1.post("/users/{user}/answer", summary="Answer questions from a user's memory")
    def answer(body: Questions, user: str = User, who: Caller = Depends(caller)) -> Any:
        return {"answers": service.answer(who.tenant, user, body.questions)}

    @v1.get("/users/{user}/graph", summary="A user's memory graph as JSON")
    def graph(user: str = User, who: Caller = Depends(caller)) -> Any:
        return service.graph(who.tenant, user)

    @v1.get("/export", summary="The tenant's whole memory as JSONL")
    def export(who: Caller = Depends(caller)) -> Any:
        handle = tempfile.NamedTemporaryFile(prefix="promem-export-", suffix=".jsonl", delete=False)
        handle.close()
        target = Path(handle.name)
        service.export(who.tenant, target)
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

    @app.middleware("http")
    async def count(request: Request, call_next: Any) -> Any:
        response = await call_next(request)
        service.metrics.request(response.status_code)
        return response

    return BodyLimit(app, max_body)
