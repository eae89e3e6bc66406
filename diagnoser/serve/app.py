"""The FastAPI application: routes, authentication, error bodies.

Every /v1 route needs `Authorization: Bearer <token>` when a token is configured; /healthz, /readyz
and /metrics do not (probes and scrapers; they reveal no log content). Errors are JSON `{"detail": ...}`.
"""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from diagnoser.bearer import authorized as bearer_authorized
from diagnoser.classify.redact import redact
from diagnoser.collect.confine import TargetError, resolve_target
from diagnoser.metrics_export import CONTENT_TYPE, Metrics
from diagnoser.models import Diagnosis
from diagnoser.retrieve.incident import ID_PATTERN, Incident, Status
from diagnoser.retrieve.paths import resolve_store_path
from diagnoser.serve.config import DEFAULT_JSON_LIMIT, ServeConfig
from diagnoser.serve.health import rules_check, store_check
from diagnoser.serve.jobs import Job, Jobs, QueueFull
from diagnoser.serve.ledger import JobLedger
from diagnoser.serve.limits import BodyLimit
from diagnoser.serve.models import FeedbackRequest, Health, JobStatus, TriageRequest
from diagnoser.serve.uploads import FIELD, UploadDir, UploadError, receive

UPLOAD_PATH = "/v1/triage/upload"
UPLOAD_BODY = {"requestBody": {"required": True, "content": {"multipart/form-data": {"schema": {
    "type": "object", "required": [FIELD], "properties": {FIELD: {
        "type": "array", "items": {"type": "string", "format": "binary"},
        "description": "Log files (their names may hold a relative path) or .tar/.tar.gz/.tgz archives"}}}}}}}
ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"description": text} for code, text in (
        (400, "Unusable request"), (401, "Missing or wrong token"), (403, "Path outside the configured roots"),
        (413, "Request body too large"), (422, "Invalid body, or logs with nothing to triage"),
        (429, "Every worker busy and the queue full: retry later"), (500, "The triage worker died"),
        (503, "Incident store unusable"))}


def job_status(job: Job) -> JobStatus:
    return JobStatus(id=job.id, kind=job.kind, status=job.status, submitted=job.submitted,  # type: ignore[arg-type]
                     finished=job.finished, seconds=round(job.seconds, 3) if job.seconds is not None else None,
                     result=job.result, error=job.error)


def create_app(cfg: ServeConfig, metrics: Metrics | None = None) -> Any:
    """The ASGI app (the FastAPI app inside the body-limit middleware; `.fastapi` is the FastAPI app)."""
    metrics = metrics or Metrics()
    roots = cfg.resolved_roots()
    store = resolve_store_path(cfg.store)
    state: dict[str, Jobs] = {}

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        state["jobs"] = Jobs(cfg.workers, cfg.queue, metrics, cfg.store, ledger=JobLedger(cfg.jobs_dir))
        try:
            yield
        finally:
            state["jobs"].close()

    api = FastAPI(title="diagnoser", version="1", lifespan=lifespan,
                  description="Failure diagnosis of GPU training jobs: the `diagnosis/v1` verdict over HTTP.")

    async def authorized(request: Request) -> None:
        if cfg.token is None:
            return
        if not bearer_authorized(request.headers.get("authorization"), cfg.token):
            raise HTTPException(401, "missing or wrong bearer token", headers={"WWW-Authenticate": "Bearer"})

    auth = [Depends(authorized)]

    async def finish(job: Job, wait: bool, request: Request) -> Any:
        if not wait:
            location = str(request.url_for("get_job", job_id=job.id).path)
            return JSONResponse(job_status(job).model_dump(mode="json"), status_code=202,
                                headers={"Location": location})
        await asyncio.wrap_future(job.future)
        if job.status == "failed":
            raise HTTPException(500 if job.crashed else 422, job.error)
        return job.result

    def submit(kind: str, paths: list[str], within: list[str] | None, cleanup: UploadDir | None = None) -> Job:
        try:
            return state["jobs"].submit(kind, paths, within, cleanup.root if cleanup else None)
        except QueueFull as exc:
            if cleanup is not None:
                cleanup.remove()
            raise HTTPException(429, str(exc), headers={"Retry-After": "5"}) from None

    def resolve(arg: str) -> list[str]:
        """A path below a root, or a job id: a `diagnoser run` directory in a root (its newest attempt's logs)."""
        if "/" not in arg:
            for runs in roots:
                try:
                    return resolve_target(arg, roots, runs)[1]
                except TargetError:
                    continue
        if not arg.startswith(("/", "~")):  # relative to the server's working directory: meaningless to a caller
            raise TargetError(f"`{arg}` is not a known job id and not an absolute path below an allowed log root")
        return resolve_target(arg, roots)[1]

    @api.post("/v1/triage", response_model=Diagnosis, dependencies=auth, tags=["triage"],
              responses={202: {"model": JobStatus, "description": "Accepted (async): poll Location"}, **ERRORS})
    async def triage_paths(body: TriageRequest, request: Request) -> Any:
        """Triage logs on the server below its configured roots (the chat bot's rules: symlinks that
        lead out are refused; a bare name is a run directory's job id). The verdict is `diagnosis/v1`,
        redacted as the CLI's."""
        paths: list[str] = []
        for arg in body.paths:
            try:
                paths += resolve(arg)
            except TargetError as exc:
                raise HTTPException(403, str(exc)) from None
        return await finish(submit("path", paths, [str(r) for r in roots]), not body.async_, request)

    @api.post(UPLOAD_PATH, response_model=Diagnosis, dependencies=auth, tags=["triage"], openapi_extra=UPLOAD_BODY,
              responses={202: {"model": JobStatus, "description": "Accepted (async): poll Location"}, **ERRORS})
    async def triage_upload(request: Request, run_async: Annotated[bool, Query(alias="async")] = False) -> Any:
        """Triage uploaded logs (multipart/form-data, field `files`, repeatable: log files whose names may
        hold a relative path, or .tar/.tar.gz archives). Written to a private temp directory as the body
        streams in, deleted after the triage."""
        if state["jobs"].active >= state["jobs"].capacity:
            raise HTTPException(429, "every worker busy and the queue full; retry later", headers={"Retry-After": "5"})
        target = UploadDir(cfg.max_upload_bytes * 8)  # unpacked logs may be larger than the archive
        try:
            await receive(request, target)
            if target.files == 0:
                raise UploadError("no files in the upload")
        except UploadError as exc:
            target.remove()
            raise HTTPException(413 if exc.too_large else 400, str(exc)) from None
        except BaseException:  # the client went away (or the body limit answered 413 already)
            target.remove()
            raise
        return await finish(submit("upload", [str(target.root)], [str(target.root)], target), not run_async, request)

    @api.get("/v1/jobs/{job_id}", response_model=JobStatus, dependencies=auth, tags=["triage"],
             responses={404: {"description": "No such job (or forgotten)"}})
    async def get_job(job_id: str) -> JobStatus:
        """An async triage: `pending`, then `done` with the `diagnosis/v1` result or `failed` with the reason."""
        job = state["jobs"].get(job_id)
        if job is None:
            raise HTTPException(404, f"no job {job_id}")
        return job_status(job)

    def open_store():
        from diagnoser.retrieve.store import IncidentStore

        return IncidentStore.create(cfg.store)

    @api.get("/v1/incidents/{incident_id}", response_model=Incident, response_model_by_alias=True,
             dependencies=auth, tags=["incidents"], responses={404: {"description": "No such incident"}, **ERRORS})
    def get_incident(incident_id: str) -> Any:
        """One incident of the incident memory (`incident/v1`), as `diagnoser incidents show --json`."""
        from diagnoser.retrieve.store import StoreError

        if not ID_PATTERN.match(incident_id):
            raise HTTPException(400, f"{incident_id!r} is not an incident id (inc-NNNNN)")
        try:
            with open_store() as st:
                inc = st.get(incident_id)
        except StoreError as exc:
            raise HTTPException(503, str(exc)) from None
        if inc is None:
            raise HTTPException(404, f"no incident {incident_id}")
        return inc.to_json_dict()

    @api.post("/v1/feedback", response_model=Incident, dependencies=auth, tags=["incidents"],
              responses={404: {"description": "No such incident"}, **ERRORS})
    def feedback(body: FeedbackRequest) -> Any:
        """Confirm or correct a verdict (as `diagnoser incidents confirm/correct`); returns the stored incident."""
        from diagnoser.retrieve.feedback import vouch
        from diagnoser.retrieve.store import StoreError

        if (body.incident is None) == (body.diagnosis is None):
            raise HTTPException(422, "give exactly one of `incident` (an id) and `diagnosis` (a diagnosis/v1 verdict)")
        fix = {"category": body.category, "subtype": body.subtype, "action": body.action}
        if body.verdict == "correct" and not any(fix.values()):
            raise HTTPException(422, "correct needs at least one of category, subtype, action")
        if body.verdict == "confirm" and any(fix.values()):
            raise HTTPException(422, "confirm takes no category/subtype/action (use verdict: correct)")
        status = Status.CONFIRMED if body.verdict == "confirm" else Status.CORRECTED
        try:
            with open_store() as st:
                stored = vouch(st, body.incident or body.diagnosis, status, body.by, body.resolution,  # type: ignore
                               body.outcome, body.job, **fix)
        except KeyError:
            raise HTTPException(404, f"no incident {body.incident}") from None
        except ValueError as exc:
            raise HTTPException(422, redact(str(exc))) from None
        except StoreError as exc:
            raise HTTPException(503, str(exc)) from None
        return stored.to_json_dict()

    @api.get("/healthz", response_model=Health, tags=["health"])
    async def healthz() -> Health:
        """Live: the server answers."""
        return Health(status="ok")

    @api.get("/readyz", response_model=Health, tags=["health"], responses={503: {"model": Health}})
    async def readyz() -> Any:
        """Ready: a worker loaded the rules, and the incident store is readable (or can be created)."""
        checks = {"rules": rules_check(state["jobs"].warm) or "ok",
                  "store": await run_in_threadpool(store_check, store) or "ok"}
        ready = all(v == "ok" for v in checks.values())
        return JSONResponse(Health(status="ok" if ready else "not ready", checks=checks).model_dump(),
                            status_code=200 if ready else 503)

    @api.get("/metrics", tags=["health"], response_class=Response)
    async def metrics_endpoint() -> Response:
        """Prometheus text format (see diagnoser/metrics_export.py for the names)."""
        return Response(metrics.exposition(), media_type=CONTENT_TYPE)

    def limit_for(path: str) -> int:
        return cfg.max_upload_bytes if path == UPLOAD_PATH else DEFAULT_JSON_LIMIT

    wrapped = BodyLimit(api, limit_for)
    wrapped.fastapi = api  # type: ignore[attr-defined]
    return wrapped
