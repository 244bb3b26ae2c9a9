"""The web app: FastAPI routes over what `UiState` read at start-up, drawn by Jinja2 templates.

Every query parameter is validated (FastAPI's bounds, then the known splits and labels); a bad
request answers a 4xx page that says why, and nothing answers with a traceback. No route opens a
path it was given: images are found by key in the record index.
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any
from urllib.parse import urlencode

import pyarrow.compute as pc
from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, Response
from fastapi.templating import Jinja2Templates
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect

from beam_pipeline.database.column_filters import ColumnFilter, parse_where
from beam_pipeline.ui import visible
from beam_pipeline.ui.chart import bar_chart
from beam_pipeline.ui.guard import AllowedHosts, Guard
from beam_pipeline.ui.neighbours import NeighbourSearch
from beam_pipeline.ui.quality import QualityRun
from beam_pipeline.ui.run_data import JobRun, PredictRun
from beam_pipeline.ui.upload_form import UploadTimedOut, read_form
from tf_serving_input import failures

PAGE_SIZE = 48
FAILURES_SHOWN = 100  # Failed rows of each reason on the failures page; the gallery's reason filter pages on.
GROUPS_SHOWN = 200  # Groups of each kind on the quality page; the gallery's group filter shows any group.
MAX_K = 100  # Neighbours a page shows (the database serves up to 1,000; a page of 1,000 thumbnails is no use).
DEFAULT_K = 8
MAX_PAGE = 1_000_000
MAX_KEY_LENGTH = 64
THUMBNAIL_SIZE = 128
# The sizes the pages ask for: a few, so the thumbnail cache holds at most a few copies of an image.
THUMBNAIL_SIZES = (64, 128, 224)
# Reason code -> HTTP status of a refused upload.
UPLOAD_STATUS = {failures.TOO_LARGE_FILE: 413, failures.NOT_AN_IMAGE: 415, failures.UNSUPPORTED_FORMAT: 415,
                 failures.EMPTY_FILE: 400}
TEMPLATES = Jinja2Templates(directory=os.path.join(os.path.dirname(__file__), "templates"))
TEMPLATES.env.globals["zip"] = zip
visible.install(TEMPLATES.env)  # Every {{ value }} of every page: invisible characters shown escaped.
# The pages' one stylesheet, read once (the Content-Security-Policy allows no inline style); no path from a request.
with open(os.path.join(os.path.dirname(__file__), "static", "ui.css"), "rb") as _css:
    STYLESHEET = _css.read()


def flag_text(flags: Any) -> str:
    """A quality flags cell as text: a list joined ('low_contrast, blurry'), anything else as it is."""
    return ", ".join(map(str, flags)) if isinstance(flags, (list, tuple)) else str(flags)


TEMPLATES.env.filters["flag_text"] = flag_text


@dataclasses.dataclass
class UiState:
    """What the app serves; each part is None when its inputs were not given."""

    job: JobRun
    predict: PredictRun | None = None
    search: NeighbourSearch | None = None
    quality: QualityRun | None = None
    max_file_bytes: int = 256 * 1024 * 1024
    upload_timeout: float = 60.0  # Seconds an upload's body may take, at least (see UPLOAD_MIN_RATE).
    upload_read_timeout: float = 10.0  # Seconds an upload may send nothing before it is cut off.

    @property
    def can_upload(self) -> bool:
        """Whether an uploaded image can be searched (a table and the export)."""
        return self.search is not None and self.search.embedder is not None


# A large upload gets longer than --upload_timeout: at least this many bytes a second must arrive.
UPLOAD_MIN_RATE = 256 * 1024

# A split or label filter is checked against the run's own values; this bounds only the request. The job
# takes labels of any length, so the bound is generous.
MAX_FILTER_LENGTH = 65536


def text_field(form: Any, name: str) -> str | None:
    """A form's text field, or None when absent or a file was sent under its name."""
    value = form.get(name)
    return value if isinstance(value, str) else None


def create_app(state: UiState, hosts: AllowedHosts | None = None) -> FastAPI:
    """The FastAPI app over `state` (no docs pages: they would load their assets from a CDN), answering only
    requests whose `Host` is one of `hosts` (default: the loopback names, any port; `guard.allowed_hosts`)."""
    app = FastAPI(title="beam-image-pipeline", docs_url=None, redoc_url=None, openapi_url=None)

    def page(request: Request, name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
        return TEMPLATES.TemplateResponse(request, name, {"state": state, **context}, status_code=status_code)

    def refuse(status: int, message: str, close: bool = False) -> None:
        # close: the client may still be sending a body nobody reads; the connection must not stay open for it.
        raise HTTPException(status, message, headers={"Connection": "close"} if close else None)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, error: RequestValidationError) -> HTMLResponse:
        problems = "; ".join(f"{'.'.join(str(p) for p in problem['loc'][1:]) or 'request'}: {problem['msg']}"
                             for problem in error.errors())
        return page(request, "error.html", 400, status=400, message=problems)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, error: HTTPException) -> HTMLResponse:
        response = page(request, "error.html", error.status_code, status=error.status_code, message=error.detail)
        response.headers.update(error.headers or {})
        return response

    async def database_down(request: Request, error: Exception) -> HTMLResponse:
        # The database stopped or is unreachable: the page says so (503: try again), no traceback.
        return page(request, "error.html", 503, status=503,
                    message=f"the database is not answering ({type(error).__name__}): try again once it is back")

    import psycopg
    import psycopg_pool

    for kind in (psycopg.OperationalError, psycopg_pool.PoolTimeout, psycopg.errors.AdminShutdown):
        app.add_exception_handler(kind, database_down)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, error: Exception) -> HTMLResponse:
        # Logged by uvicorn with its traceback; the page says only what kind of error.
        return page(request, "error.html", 500, status=500, message=f"internal error ({type(error).__name__})")

    def known(value: str | None, allowed: list[str], name: str) -> str | None:
        if value in (None, ""):
            return None
        if value not in allowed:
            refuse(400, f"{name}: {value[:80]!r} is none of this run's {name}s ({', '.join(allowed)[:400]})")
        return value

    def column_filters(where: str | None) -> tuple[ColumnFilter, ...]:
        """The kept-column filters of a search: NAME=VALUE (or <, <=, >, >= a number), several joined by ' AND '."""
        if not where or not where.strip():
            return ()
        try:
            return tuple(parse_where(part.strip()) for part in where.split(" AND "))
        except ValueError as error:
            refuse(400, str(error))
            raise  # refuse raises; this line only tells the type checker so.

    def entry_or_404(key: str):
        entry = state.job.index.get(key) if len(key) <= MAX_KEY_LENGTH else None
        if entry is None:
            refuse(404, f"no stored image has the key {key[:MAX_KEY_LENGTH]!r}")
        return entry

    def refusal_page(scope: Any, status: int, message: str) -> HTMLResponse:
        return page(Request(scope), "error.html", status, status=status, message=message)

    app.add_middleware(Guard, hosts=hosts or AllowedHosts(), refusal=refusal_page)

    @app.get("/static/ui.css")
    def stylesheet() -> Response:
        return Response(STYLESHEET, media_type="text/css", headers={"Cache-Control": "max-age=3600"})

    @app.get("/", response_class=HTMLResponse)
    def overview(request: Request) -> HTMLResponse:
        job = state.job
        return page(request, "overview.html", manifest=job.manifest,
                    chart=bar_chart(dict(job.label_counts), "images per label"))

    @app.get("/gallery", response_class=HTMLResponse)
    def gallery(request: Request, split: str | None = Query(None, max_length=MAX_FILTER_LENGTH),
                label: str | None = Query(None, max_length=MAX_FILTER_LENGTH),
                reason: str | None = Query(None, max_length=MAX_FILTER_LENGTH),
                flag: str | None = Query(None, max_length=MAX_FILTER_LENGTH),
                group_text: str | None = Query(None, alias="group", max_length=20),
                page_number: int = Query(1, alias="page", ge=1, le=MAX_PAGE)) -> HTMLResponse:
        # Every filter is a pyarrow.compute query over the image index: rows, then one page of them.
        job, quality = state.job, state.quality
        # The form sends every field, the unused ones empty: "" is no filter, like split's and label's.
        if group_text and not (group_text.isascii() and group_text.isdigit()):
            refuse(400, f"group: a group number, not {group_text[:20]!r}")
        group = int(group_text) if group_text else None
        split, label = known(split, job.splits, "split"), known(label, job.labels, "label")
        reason = known(reason, list(job.failure_counts), "reason")
        if (flag or group is not None) and quality is None:
            refuse(404, "the flag and group filters need a quality folder: start the UI with --quality_dir")
        within = None
        if quality is not None:
            flag = known(flag, quality.flag_names, "flag")
            if group is not None and not quality.has_group(group):
                refuse(404, f"no duplicate group {group} in the quality folder")
            for rows in ([quality.rows_with_flag(flag)] if flag else []) + (
                    [quality.rows_in_group(group)] if group is not None else []):
                within = rows if within is None else within.filter(pc.is_in(within, value_set=rows))
        if reason is not None:
            if label or within is not None:
                refuse(400, "reason: a failed row has no image, so it takes only the split filter")
            rows = job.failures(reason, split)
        else:
            rows = job.select(split, label, within)
        total = len(rows)
        pages = max(1, math.ceil(total / PAGE_SIZE))
        if page_number > pages:
            refuse(404, f"page {page_number} is past the last page ({pages})")
        shown = rows.slice((page_number - 1) * PAGE_SIZE, PAGE_SIZE)
        entries = job.index.entries(shown) if reason is None else []
        failed = job.failure_rows(shown) if reason is not None else []
        filters = {"split": split, "label": label, "reason": reason, "flag": flag,
                   "group": None if group is None else str(group)}
        return page(request, "gallery.html", entries=entries, failed=failed, filters=filters, split=split,
                    label=label, page=page_number, pages=pages, total=total,
                    query=urlencode({name: value for name, value in filters.items() if value is not None}))

    @app.get("/item/{key}", response_class=HTMLResponse)
    def item(request: Request, key: str, k: int = Query(DEFAULT_K, ge=1, le=MAX_K)) -> HTMLResponse:
        entry = entry_or_404(key)
        top_k = state.predict.top_k(key) if state.predict else None
        neighbours, problem = None, None
        if state.search is not None:
            try:
                neighbours = state.search.by_key(key, k)
            except LookupError as error:
                problem = str(error)
        group = state.quality.group_of(key) if state.quality else None
        flags = state.quality.flags_of(key) if state.quality else None
        return page(request, "item.html", entry=entry, top_k=top_k, neighbours=neighbours, problem=problem,
                    group=group, flags=flags, k=k, kept=state.job.kept_columns(key))

    @app.get("/image/{key}")
    def image(key: str, size: int = Query(THUMBNAIL_SIZE, ge=1, le=max(THUMBNAIL_SIZES))) -> Response:
        if size not in THUMBNAIL_SIZES:
            refuse(400, f"size: one of {', '.join(map(str, THUMBNAIL_SIZES))}, not {size}")
        entry_or_404(key)
        return Response(state.job.index.thumbnail(key, size), media_type="image/png",
                        headers={"Cache-Control": "max-age=3600"})

    @app.get("/failures", response_class=HTMLResponse)
    def failures_page(request: Request) -> HTMLResponse:
        # Each reason's count and first rows; the gallery's reason filter pages through all of them.
        by_reason = {reason: (count, state.job.failure_rows(state.job.failures(reason).slice(0, FAILURES_SHOWN)))
                     for reason, count in state.job.failure_counts.items()}
        return page(request, "failures.html", by_reason=by_reason, reasons=failures.REASONS)

    @app.get("/search", response_class=HTMLResponse)
    def search_form(request: Request, key: str | None = Query(None, max_length=MAX_KEY_LENGTH),
                    k: int = Query(DEFAULT_K, ge=1, le=MAX_K),
                    split: str | None = Query(None, max_length=MAX_FILTER_LENGTH),
                    label: str | None = Query(None, max_length=MAX_FILTER_LENGTH),
                    where: str | None = Query(None, max_length=MAX_FILTER_LENGTH)) -> HTMLResponse:
        if state.search is None:
            refuse(404, "search needs the predictions table: start the UI with --predictions_dir and --database")
        split, label = known(split, state.job.splits, "split"), known(label, state.job.labels, "label")
        filters = column_filters(where)
        neighbours = None
        if key:
            entry_or_404(key)
            try:
                neighbours = state.search.by_key(key, k, split, label, filters)
            except LookupError as error:
                refuse(404, str(error))
        return page(request, "search.html", neighbours=neighbours, query_key=key, k=k, split=split, label=label,
                    where=where or "")

    @app.post("/search", response_class=HTMLResponse)
    async def search_upload(request: Request, k: int = Query(DEFAULT_K, ge=1, le=MAX_K)) -> HTMLResponse:
        if not state.can_upload:
            refuse(404, "search by upload needs the export: start the UI with --model_dir and the predictions table")
        limit = state.max_file_bytes
        declared = request.headers.get("content-length", "")
        if not declared.isdigit():  # A chunked body would be spooled whole before its size is known.
            refuse(411, "POST /search needs a Content-Length (a browser's form upload sends one)")
        if int(declared) > limit + 64 * 1024:  # Refused before a byte is parsed (64 KiB for the form's framing).
            refuse(413, f"{failures.TOO_LARGE_FILE}: the upload is more than --max_file_bytes={limit} bytes")
        # Two limits: the whole body within `deadline` (a trickle of a byte a second is cut off too), and
        # no wait of more than --upload_read_timeout for the next piece (a stall is cut off sooner).
        deadline = max(state.upload_timeout, int(declared) / UPLOAD_MIN_RATE)
        try:
            form = await read_form(request, deadline, state.upload_read_timeout, max_files=1, max_fields=8)
        except UploadTimedOut as timed_out:
            if timed_out.silent:
                refuse(408, f"the upload sent nothing for {state.upload_read_timeout:g} s (--upload_read_timeout): "
                            "send it again", close=True)
            refuse(408, f"the upload did not arrive within {deadline:g} s (--upload_timeout): send it again",
                   close=True)
        except ClientDisconnect:  # The client went away mid-upload: nobody to answer, nothing to log.
            return Response(status_code=400)
        upload = form.get("image")
        if upload is None or isinstance(upload, str):
            refuse(400, "POST /search takes a multipart/form-data body with a file field named 'image'")
        data = await upload.read(limit + 1)
        # The form's filters: text fields, checked against the run's own splits and labels like the gallery's.
        split, label = (known(text_field(form, name), allowed, name)
                        for name, allowed in (("split", state.job.splits), ("label", state.job.labels)))
        where = text_field(form, "where")
        filters = column_filters(where)
        await form.close()
        if len(data) > limit:
            refuse(413, f"{failures.TOO_LARGE_FILE}: the upload is more than --max_file_bytes={limit} bytes")
        try:
            neighbours = await run_in_threadpool(state.search.by_image, data, k, split, label, filters)
        except failures.RowFailure as failure:
            refuse(UPLOAD_STATUS.get(failure.reason, 422), f"{failure.reason}: {failure.detail}")
        return page(request, "search.html", neighbours=neighbours, query_key=None, k=k, split=split, label=label,
                    query_name=(upload.filename or "upload")[:200], where=where or "")

    @app.get("/quality", response_class=HTMLResponse)
    def quality(request: Request) -> HTMLResponse:
        if state.quality is None:
            refuse(404, "quality pages need a quality folder: start the UI with --quality_dir")
        return page(request, "quality.html", quality=state.quality, groups_shown=GROUPS_SHOWN)

    return app
