"""What an object store (gs://, s3://) answered, from the errors its client libraries raise.

Google's clients raise `google.api_core.exceptions.NotFound` / `Forbidden` (with `.code`, the HTTP
status) for reads and metadata, and google-resumable-media's `InvalidResponse` (with `.response`)
for uploads; their text holds the request's full URL, which is never shown (it may carry an
endpoint's user:password, and says nothing a user can act on). Boto's `ClientError` carries the
status in `.response["ResponseMetadata"]["HTTPStatusCode"]`.
"""

from __future__ import annotations

from tf_serving_input.layout import is_local

NOT_FOUND = 404
DENIED = (401, 403)


def _own_status(error: BaseException) -> int | None:
    module = type(error).__module__
    if module.startswith(("google.", "google_")):
        code = getattr(error, "code", None)
        if isinstance(code, int) and 400 <= code < 600:
            return code
        status = getattr(getattr(error, "response", None), "status_code", None)
        if isinstance(status, int):
            return status
    if module.startswith("botocore"):
        response = getattr(error, "response", None)
        if isinstance(response, dict):
            status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if isinstance(status, int):
                return status
    return None


def http_status(error: BaseException) -> int | None:
    """The HTTP status an object store answered, found in `error`'s chain (causes, contexts, Beam's IO
    errors' details), or None when no object store's error is there."""
    for current in error_chain(error):
        status = _own_status(current)
        if status is not None:
            return status
    return None


def error_chain(error: BaseException) -> list[BaseException]:
    """The exception, its causes and contexts, and what Beam's IO errors hold, each once."""
    seen: list[BaseException] = []
    pending: list[BaseException | None] = [error]
    while pending:
        current = pending.pop()
        if current is None or any(current is s for s in seen):
            continue
        seen.append(current)
        pending += [current.__cause__, current.__context__]
        details = getattr(current, "exception_details", None)  # BeamIOError: {path: exception}
        if isinstance(details, dict):
            pending += [value for value in details.values() if isinstance(value, BaseException)]
    return seen


def denied(error: BaseException) -> bool:
    """Whether an object store refused the credentials in use (401 or 403)."""
    return http_status(error) in DENIED


def not_found(error: BaseException) -> bool:
    """Whether an object store answered 404 (no such object, or no such bucket)."""
    return http_status(error) == NOT_FOUND


def describe(error: BaseException) -> str | None:
    """What an object store's refusal or 404 means, in words (None for any other error)."""
    return describe_status(http_status(error))


def describe_status(status: int | None) -> str | None:
    """`describe` for an HTTP status already found."""
    if status in DENIED:
        return (f"the object store refused the credentials in use (HTTP {status}): grant them access to the bucket, "
                "or choose another folder")
    if status == NOT_FOUND:
        return "the bucket does not exist (HTTP 404): create it, or correct the bucket's name"
    return None


def folder_problem(path: str) -> str | None:
    """Why a folder on an object store cannot be used, found by listing it before any work (None: it can be
    listed, the failure is another kind, or `path` is local)."""
    if is_local(path):
        return None
    from apache_beam.io.filesystems import FileSystems

    try:
        FileSystems.match([path.rstrip("/") + "/*"], limits=[1])
    except Exception as error:  # noqa: BLE001 - told apart by describe; anything else shows up later, as before.
        return describe(error)
    return None
