"""Why a row failed: stable reason codes (the output contract's `reason`) and readable details.

Every failed row in errors.jsonl carries one code from `REASONS` plus a
human `detail`; the manifest's `failed_by_reason` counts codes. Codes never
change meaning; details are free text and may. Pure Python.
"""

from __future__ import annotations

from tf_serving_input import formats

FILE_NOT_FOUND = "file_not_found"
PATH_TOO_LONG = "path_too_long"
PERMISSION_DENIED = "permission_denied"
IS_A_DIRECTORY = "is_a_directory"
SYMLINK_LOOP = "symlink_loop"
EMPTY_FILE = "empty_file"
TOO_LARGE_FILE = "too_large_file"
TOO_MANY_PIXELS = "too_many_pixels"
TRUNCATED = "truncated"
CORRUPT = "corrupt"
UNSUPPORTED_FORMAT = "unsupported_format"
NOT_AN_IMAGE = "not_an_image"
READ_ERROR = "read_error"
UNEXPECTED = "unexpected"
# The predict job and its database load (not the preprocessing job).
INPUT_SHARD_DAMAGED = "input_shard_damaged"
UNSTORABLE_TEXT = "unstorable_text"
# Rows whose path cell is an http(s) URL (beam_pipeline/inputs/http_fetch.py).
BAD_URL = "bad_url"
DNS_FAILED = "dns_failed"
CONNECTION_FAILED = "connection_failed"
TLS_FAILED = "tls_failed"
TIMEOUT = "timeout"
HTTP_403 = "http_403"
HTTP_404 = "http_404"
HTTP_410 = "http_410"
HTTP_4XX = "http_4xx"
HTTP_429 = "http_429"
HTTP_5XX = "http_5xx"
TOO_MANY_REDIRECTS = "too_many_redirects"
TOO_LARGE = "too_large"
OPTED_OUT = "opted_out"
# A file: URL cell naming another machine's file (beam_pipeline/inputs/file_urls.py).
REMOTE_FILE_URL = "remote_file_url"
# The user's own steps (--image_step; tf_serving_input/steps.py).
STEP_FAILED = "step_failed"
STEP_BAD_OUTPUT = "step_bad_output"
STEP_TIMEOUT = "step_timeout"
# A kept column's cell (--column; beam_pipeline/inputs/cells.py).
BAD_VALUE = "bad_value"

REASONS = {
    FILE_NOT_FOUND: ("the path names no file: nothing is there, a symbolic link points at nothing, or a name on "
                     "the path is a file, not a folder (ENOENT, ENOTDIR), or the row's path is empty"),
    PATH_TOO_LONG: "the path, or one of its names, is longer than the operating system allows (ENAMETOOLONG)",
    PERMISSION_DENIED: "the job's user may not read the file or search a folder on its path (EACCES, EPERM)",
    IS_A_DIRECTORY: "the path names a directory, not a file (EISDIR)",
    SYMLINK_LOOP: "the path's symbolic links lead round in a loop: too many levels of symbolic links (ELOOP)",
    EMPTY_FILE: "the file has 0 bytes",
    TOO_LARGE_FILE: "the file is larger than --max_file_bytes (it is not read whole)",
    TOO_MANY_PIXELS: "the header claims more pixels than --max_pixels (refused before decoding)",
    TRUNCATED: ("the image data ends early (an interrupted download or copy), also when an end-of-image marker "
                "follows the cut or a JPEG header claims more than its data holds (libjpeg would fill the rest with "
                "grey; the detail says so)"),
    CORRUPT: "the image data or its header cannot be decoded",
    UNSUPPORTED_FORMAT: "a recognised image or document format that is not decoded (the detail names it)",
    NOT_AN_IMAGE: "the content is no known image format (text, HTML, ...)",
    READ_ERROR: ("the file could not be read: an I/O error or another OS error (EIO, ...; the detail names it "
                 "and the path), or the path names a FIFO, a device or a socket"),
    UNEXPECTED: "anything else: a bug to report, with the detail",
    INPUT_SHARD_DAMAGED: ("the job's shard holding the row is truncated, or does not match the SHA-256 in the job's "
                          "manifest or its records' CRCs (the detail says which): it was not predicted"),
    UNSTORABLE_TEXT: "the row holds text the database cannot store (a NUL byte): it is in Parquet, not in the table",
    BAD_URL: ("the URL cannot be fetched: a scheme other than http(s) (ftp:, data:, ...; file: URLs and the Beam "
              "filesystems' schemes are files), an unparsable URL, a redirect without a Location or to another "
              "scheme, or an address on a loopback, private or link-local network without --url_allow_private; "
              "or a file: URL that names no file: a relative path (file:a.jpg), a query or fragment, an encoded "
              "'/' (%2F) or NUL (%00)"),
    DNS_FAILED: "the URL's host name does not resolve",
    CONNECTION_FAILED: ("the connection was refused, reset or closed before the whole body came, after "
                        "--url_max_attempts attempts"),
    TLS_FAILED: "the HTTPS handshake failed: a certificate that does not match or is not trusted, or no TLS there",
    TIMEOUT: ("connecting or reading took longer than --url_connect_timeout / --url_read_timeout, or the whole "
              "fetch (redirects and retries included) longer than --url_timeout"),
    HTTP_403: "the server answered 403 Forbidden",
    HTTP_404: "the server answered 404 Not Found",
    HTTP_410: "the server answered 410 Gone",
    HTTP_4XX: "the server answered another 4xx status (the detail names it); never retried",
    HTTP_429: "the server answered 429 Too Many Requests on every attempt (Retry-After honoured up to its cap)",
    HTTP_5XX: "the server answered a 5xx status on every attempt",
    TOO_MANY_REDIRECTS: "the URL redirected more than --url_max_redirects times",
    TOO_LARGE: "the server's body is larger than --max_file_bytes (refused as it streams, or from Content-Length)",
    OPTED_OUT: ("the server opted the image out of AI use (X-Robots-Tag noai, noimageai, noindex or noimageindex, "
                "for all agents or for beam-image-pipeline): it is not written"),
    REMOTE_FILE_URL: ("a file: URL names a host other than localhost (file://HOST/path): another machine's file, "
                      "which is not read; file:///path and file://localhost/path are this machine's files"),
    STEP_FAILED: ("a --image_step raised for this image: the detail names the step, the error's type and its "
                  "first line (a Python step's traceback is in the run's log)"),
    STEP_BAD_OUTPUT: ("a --image_step returned something that is not a uint8 [h, w, 3] image with h, w >= 1 (another "
                      "dtype, rank or channel count, an empty image, not an array), or a Python step's image of "
                      "more than --max_pixels pixels: the detail says what came back"),
    STEP_TIMEOUT: ("a Python --image_step ran longer than --step_timeout seconds on this image: it was stopped (its "
                   "process replaced) and the shard went on"),
    BAD_VALUE: ("a cell of a kept column (--column, or a multi-label label column) is not a value of the column's "
                "type: the detail names the column and quotes the cell (escaped, cut to 80 characters); the image "
                "is not read"),
}

# Failures a later `--retry_failed` run fetches again: they may not happen twice.
TRANSIENT = frozenset({TIMEOUT, CONNECTION_FAILED, HTTP_429, HTTP_5XX})

# The checks the preprocessing makes before decoding (preprocessing.inspect_image), by the index
# its TensorFlow ops return; preprocessing.problem_detail says what each found.
PROBLEMS = (None, NOT_AN_IMAGE, UNSUPPORTED_FORMAT, TOO_MANY_PIXELS, CORRUPT)
# The checks the decode itself makes (a JPEG scan that ends early: preprocessing._decode_jpeg); they
# fail the op with '<reason code>: <detail>' as the PROBLEMS do in serving.
DECODE_CHECKS = (TRUNCATED,)


class RowFailure(Exception):
    """One row's failure: a stable `reason` code and a readable `detail`.

    `fields` holds what errors.jsonl adds for a URL row (`url` without its password, `http_status`,
    `attempts`); it is empty for files and takes no part in equality.
    """

    def __init__(self, reason: str, detail: str, fields: dict[str, object] | None = None) -> None:
        assert reason in REASONS, reason
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail
        self.fields = dict(fields or {})

    def __reduce__(self):  # type: ignore[no-untyped-def]
        # Exceptions pickle their args only: keep the fields when a failure crosses processes.
        return (RowFailure, (self.reason, self.detail, self.fields))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RowFailure) and (self.reason, self.detail) == (other.reason, other.detail)

    def __hash__(self) -> int:
        return hash((self.reason, self.detail))


def describe_decode_failure(data: bytes, error: BaseException) -> RowFailure:
    """The RowFailure for image bytes a decode op refused: truncated or corrupt, with the op's words.

    A check of the preprocessing's own ('<reason code>: <detail>', `DECODE_CHECKS`) keeps its reason.
    """
    checked = _checked_failure(op_error_message(error), DECODE_CHECKS)
    if checked is not None:
        return checked
    name = formats.sniff(data) or "image"
    reason = TRUNCATED if formats.looks_truncated(data, name) else CORRUPT
    return RowFailure(reason, f"{name.upper()} data could not be decoded: {op_error_message(error)}")


def op_error_message(error: BaseException) -> str:
    """What a TensorFlow op said, in one line, without the graph's node and traceback decoration."""
    message = getattr(error, "message", None) or str(error)
    for line in message.splitlines():
        if line[:1].isspace():  # A traceback's "File ..." lines, the "[[{{node ...}}]]" trailer.
            continue
        if line.startswith("{{function_node"):  # "{{function_node NAME}} the op's words"
            line = line.partition("}}")[2].strip()
        if not line or line.startswith(("Detected at node", "Graph execution error", "<stack traces")):
            continue
        return line.split(" [Op:")[0].split("\n")[0].strip()
    return type(error).__name__


def from_serving_error(data: bytes, error: BaseException) -> RowFailure:
    """The RowFailure of image bytes a serving signature refused.

    The signature's checks fail with '<reason code>: <detail>' (preprocessing.assert_decodable);
    anything else is a decode op's error (truncated or corrupt).
    """
    checked = _checked_failure(op_error_message(error), PROBLEMS[1:])
    return checked if checked is not None else describe_decode_failure(data, error)


def _checked_failure(message: str, reasons: tuple[str | None, ...]) -> RowFailure | None:
    """The RowFailure of a preprocessing check's '<reason code>: <detail>' in an op's message, if it is one."""
    for reason in reasons:
        marker = f"{reason}: "
        if reason is not None and marker in message:
            return RowFailure(reason, message.split(marker, 1)[1].rstrip("]'\""))
    return None
