"""The HTTP API (FastAPI): versioned routes under ``/v1``, OpenAPI at ``/docs`` (Swagger UI shipped in the package,
no CDN), the web page at ``/``.

Every ``/v1`` route depends on :func:`caller`, which turns the presented API key into a tenant; no route reads
a tenant from the path, query or body. A user, memory or job the tenant does not have is a plain 404, the same
whether another tenant has it or nobody does.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any, NoReturn

from promem_fast.deps import require
from promem_fast.errors import InputError, PromemError
from promem_fast.serve import schemas as api
from promem_fast.serve.guards import (MAX_ID, URL_KEY_REFUSED, NodeId, SessionId, User, filters_query, key_in_url,
                                     text_body)
from promem_fast.serve.keys import Caller
from promem_fast.serve.limits import BodyLimit, RateLimiter
from promem_fast.serve.metrics import CountResponses
from promem_fast.serve.service import NotFound, Service
from promem_fast.shapes import as_sessions, scoped, with_scopes

require("fastapi", "serve")
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi import Path as PathParam
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.staticfiles import StaticFiles

STATIC = Path(__file__).resolve().parent / "static"
UNAUTHORIZED = {"WWW-Authenticate": "Bearer"}
KEY_HELP = ("invalid or missing API key: send 'Authorization: Bearer pmk_…' or 'X-API-Key: pmk_…' "
            "(the operator makes keys with: promem keys create --db STORE --tenant NAME)")



_bearer = HTTPBearer(auto_error=False)


async def caller(request: Request,
                 bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> Caller:
    """The key's caller (``Authorization: Bearer KEY`` or ``X-API-Key: KEY``); declared as a bearer scheme so the
    OpenAPI page offers to authorize. 401 for a bad key, 429 past the key's rate.

    A coroutine, so it runs on the event loop: the check is one indexed row read, far less than a hop to the
    thread pool and back, which on a busy machine costs a wait for the scheduler each way."""
    if key_in_url(request):
        _refuse(request, URL_KEY_REFUSED)
    key = bearer.credentials if bearer is not None else request.headers.get("x-api-key", "")
    found = request.app.state.service.keys.check(key)
    if found is None:
        _refuse(request, KEY_HELP)
    limiter: RateLimiter = request.app.state.limiter
    wait = limiter.acquire(found.key_id)
    if wait > 0:
        raise HTTPException(429, "rate limit exceeded", headers={"Retry-After": limiter.retry_after(wait)})
    return found


def _refuse(request: Request, detail: str) -> NoReturn:
    """401, or 429 once the client's address has sent too many requests without a valid key (guessing keys
    or a misconfigured client flooding the log); a valid key is never held back by them."""
    limiter: RateLimiter = request.app.state.auth_failures
    wait = limiter.acquire(request.client.host if request.client else "")
    if wait > 0:
        raise HTTPException(429, "too many requests without a valid API key",
                            headers={"Retry-After": limiter.retry_after(wait)})
    raise HTTPException(401, detail, headers=UNAUTHORIZED)


Who = Annotated[Caller, Depends(caller)]
Filters = Annotated[dict[str, Any] | None, Depends(filters_query)]


AUTH_FAILURE_RATE, AUTH_FAILURE_BURST = 1.0, 100
"""Requests without a valid key that one client address may send: a burst of 100, then one a second (kept
whatever ``--rate`` says, which limits the requests of valid keys)."""


def scope(body: api.TimeScope) -> dict[str, str]:
    """The time arguments a request gave, as keywords for the service (those left out are not passed)."""
    return {name: value for name, value in body.model_dump(include={"as_of", "since", "until"}).items()
            if value is not None}


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
    app.state.auth_failures = RateLimiter(AUTH_FAILURE_RATE, AUTH_FAILURE_BURST)
    v1 = APIRouter(prefix="/v1", dependencies=[Depends(caller), Depends(text_body)])

    _job_routes(v1, service)
    _memory_routes(v1, service)
    _query_routes(v1, service)
    app.include_router(v1)
    _service_routes(app, service)
    _error_handlers(app)
    return BodyLimit(CountResponses(app, service.metrics), max_body)


def _job_routes(v1: APIRouter, service: Service) -> None:
    """Sessions queued for extraction and the jobs that follow them."""
    @v1.post("/users/{user_id}/sessions", status_code=202, response_model=api.Accepted,
             summary="Queue sessions of a user for extraction")
    def add(body: api.AddSessions, user_id: User, who: Who) -> Any:
        metadata = with_scopes(body.metadata, expiration_date=body.expiration_date) or None
        sessions = (scoped(body.sessions, metadata=metadata, infer=body.infer) if body.sessions is not None
                    else as_sessions(body.messages, body.date, metadata=metadata, infer=body.infer,
                                     session_id=body.session_id))
        job, rejected = service.submit(who.tenant, user_id, sessions)
        if job is None:
            return JSONResponse({"detail": rejected}, status_code=422)
        return {"job_id": job, "accepted": len(sessions) - len(rejected), "rejected": rejected}

    @v1.get("/jobs/{job_id}", response_model=api.Job, summary="Progress of a job")
    def job(job_id: Annotated[str, PathParam(max_length=64)], who: Who) -> Any:
        return service.job(who.tenant, job_id)


def _memory_routes(v1: APIRouter, service: Service) -> None:
    """A tenant's users, memories and sessions: read and delete."""
    @v1.get("/users", response_model=api.Users, summary="Users with memory")
    def users(who: Who) -> Any:
        return {"users": service.users(who.tenant)}

    @v1.get("/users/{user_id}/memories", response_model=api.Memories,
            summary="All memories of a user")
    def memories(user_id: User, who: Who, filters: Filters,
                 history: Annotated[bool, Query(description="include superseded versions")] = False,
                 top_k: Annotated[int | None, Query(ge=0, le=MAX_ID, description="only the first this many "
                                                    "(oldest first)")] = None,
                 show_expired: Annotated[bool, Query(description="also memories past their session's "
                                                     "expiration_date")] = False) -> Any:
        return {"memories": service.memories(who.tenant, user_id, history=history, filters=filters, top_k=top_k,
                                             show_expired=show_expired)}

    @v1.get("/users/{user_id}/memories/{node_id}", response_model=api.Memory, summary="One memory")
    def memory(node_id: NodeId, user_id: User, who: Who) -> Any:
        return service.memory(who.tenant, user_id, node_id)

    @v1.get("/users/{user_id}/memories/{node_id}/history", response_model=api.History,
            summary="What a memory replaced and what replaced it")
    def history(node_id: NodeId, user_id: User, who: Who) -> Any:
        return service.history(who.tenant, user_id, node_id)

    @v1.patch("/users/{user_id}/memories/{node_id}", response_model=api.Memory,
              summary="Edit a memory: new text, metadata of its own")
    def update(body: api.Update, node_id: NodeId, user_id: User, who: Who) -> Any:
        return service.update(who.tenant, user_id, node_id, body.data or body.text, body.changes())

    @v1.delete("/users/{user_id}/memories/{node_id}", response_model=api.Deleted, summary="Delete one memory")
    def delete_memory(node_id: NodeId, user_id: User, who: Who) -> Any:
        return {"deleted": service.delete(who.tenant, user_id, node=node_id)}

    # the same four by id alone, whoever the tenant's user (mem0's get, update, history and delete by memory_id)
    @v1.get("/memories/{node_id}", response_model=api.Memory, summary="One memory of the tenant by id")
    def memory_by_id(node_id: NodeId, who: Who) -> Any:
        return service.memory(who.tenant, service.owner(who.tenant, node_id), node_id)

    @v1.get("/memories/{node_id}/history", response_model=api.History,
            summary="What a memory of the tenant replaced and what replaced it")
    def history_by_id(node_id: NodeId, who: Who) -> Any:
        return service.history(who.tenant, service.owner(who.tenant, node_id), node_id)

    @v1.patch("/memories/{node_id}", response_model=api.Memory, summary="Edit a memory of the tenant by id")
    def update_by_id(body: api.Update, node_id: NodeId, who: Who) -> Any:
        return service.update(who.tenant, service.owner(who.tenant, node_id), node_id, body.data or body.text,
                              body.changes())

    @v1.delete("/memories/{node_id}", response_model=api.Deleted, summary="Delete one memory of the tenant")
    def delete_by_id(node_id: NodeId, who: Who) -> Any:
        return {"deleted": service.delete(who.tenant, service.owner(who.tenant, node_id), node=node_id)}

    @v1.get("/users/{user_id}/sessions", response_model=api.Sessions, summary="Sessions stored for a user")
    def sessions(user_id: User, who: Who) -> Any:
        return {"sessions": service.sessions(who.tenant, user_id)}

    @v1.delete("/users/{user_id}/sessions/{session_id}", response_model=api.Deleted,
               summary="Delete one session's memory")
    def delete_session(session_id: SessionId, user_id: User, who: Who) -> Any:
        return {"deleted": service.delete(who.tenant, user_id, session=session_id)}

    @v1.delete("/users/{user_id}", response_model=api.Deleted,
               summary="Delete all memory of a user, or (with filters) that of the sessions whose metadata meets them")
    def delete_user(user_id: User, who: Who, filters: Filters) -> Any:
        return {"deleted": service.delete(who.tenant, user_id, filters=filters)}

    @v1.post("/reset", response_model=api.Deleted, summary="Delete all memory of every user of the key's tenant")
    def reset(who: Who) -> Any:
        return {"deleted": service.reset(who.tenant)}


def _query_routes(v1: APIRouter, service: Service) -> None:
    """Search, answers, the graph and the export of a user's (or tenant's) memory."""
    @v1.post("/users/{user_id}/search", response_model=api.Hits,
             summary="Memories nearest a query")
    async def search(body: api.SearchQuery, user_id: User, who: Who) -> Any:
        # one hop to the thread pool for the search itself (a real embedder may take milliseconds), none for
        # the key check before it or the reply's validation after it
        return {"results": await run_in_threadpool(service.search, who.tenant, user_id, body.query, body.count(),
                                                   filters=body.filters, threshold=body.threshold,
                                                   show_expired=body.show_expired, explain=body.explain,
                                                   **scope(body))}

    @v1.post("/users/{user_id}/answer", response_model=api.Answer, summary="Answer a question from a user's memory")
    def answer(body: api.Question, user_id: User, who: Who) -> Any:
        return service.answer(who.tenant, user_id, body.question, filters=body.filters, **scope(body))

    @v1.get("/users/{user_id}/graph", response_model=api.Graph, summary="A user's memory graph as JSON")
    def graph(user_id: User, who: Who) -> Any:
        return service.graph(who.tenant, user_id)

    @v1.get("/export", summary="The tenant's whole memory as JSONL")
    def export(who: Who) -> Any:
        reader = service.export(who.tenant)  # already unlinked: nothing is left behind whatever the client does

        def chunks() -> Iterator[bytes]:
            with reader:
                yield from iter(lambda: reader.read(1 << 16), b"")
        return StreamingResponse(chunks(), media_type="application/x-ndjson",
                                 headers={"Content-Disposition": 'attachment; filename="promem-export.jsonl"'})


def _service_routes(app: FastAPI, service: Service) -> None:
    """Health, metrics, the API docs and the web page, outside ``/v1`` and its key check."""
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


def _error_handlers(app: FastAPI) -> None:
    """What the service's own errors become over HTTP: 404 for what is not there, 503 for what cannot be served now."""
    @app.exception_handler(NotFound)
    def not_found(request: Request, exc: NotFound) -> JSONResponse:
        return JSONResponse({"detail": "not found"}, status_code=404)

    @app.exception_handler(InputError)
    def bad_input(request: Request, exc: InputError) -> JSONResponse:
        """The request's own fault (a time that breaks the date rule, an empty window): 422 naming the field,
        in FastAPI's validation shape."""
        return JSONResponse({"detail": [{"loc": ["body", exc.field] if exc.field else ["body"],
                                         "field": f"body.{exc.field}" if exc.field else "body",
                                         "msg": exc.message, "type": "value_error"}]}, status_code=422)

    @app.exception_handler(PromemError)
    def unavailable(request: Request, exc: PromemError) -> JSONResponse:
        """The engine or the store could not serve the request now (stopping, a backend gone, timed out)."""
        return JSONResponse({"detail": str(exc)}, status_code=503)
