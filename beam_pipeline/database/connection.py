"""Which database a `--database` value names, connections to it, and how it is named in messages (never a password).

`--database embedded` is a real PostgreSQL server (with pgvector) in a data
folder, on a private Unix socket (`server.py`); any `postgresql://` URL points
at a standing server instead (at scale: Cloud SQL, AlloyDB); `none` keeps the
Parquet output only.
"""

import urllib.parse

from beam_pipeline.common.redact import redact, register_url

EMBEDDED = "embedded"
NONE = "none"


class DatabaseError(RuntimeError):
    """The database cannot be used as asked; the message names the target (never a password)."""


class NoDatabase(DatabaseError):
    """A command that only reads was pointed at an embedded data folder that holds no database: bad input (exit 2),
    refused before anything is created there."""


def describe(url):
    """A database URL without its password, for messages."""
    if not url.startswith(("postgresql://", "postgres://")):
        return redact(url)
    parts = urllib.parse.urlsplit(url)
    netloc = parts.hostname or ""
    if parts.port:
        netloc += f":{parts.port}"
    if parts.username:
        netloc = f"{parts.username}@{netloc}"
    socket_dir = urllib.parse.parse_qs(parts.query).get("host", [""])[0]
    where = f" (socket in {socket_dir})" if socket_dir else ""
    return f"{parts.scheme}://{netloc}{parts.path}{where}"


def database_flag_problem(value, allow_none=True):
    """Why a --database value cannot be used (one line, no password), or None when it can."""
    choices = "'embedded', 'none' or a postgresql:// URL" if allow_none else "'embedded' or a postgresql:// URL"
    if value == EMBEDDED or (allow_none and value == NONE):
        return None
    register_url(value)
    if not value.startswith(("postgresql://", "postgres://")):
        return f"--database must be {choices}, not {redact(value)[:200]!r}"
    try:
        parts = urllib.parse.urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number.
    except ValueError as error:
        return f"--database {describe_unparsed(value)} is not a valid postgresql:// URL ({error})"
    return None


def describe_unparsed(url):
    """A URL that urllib cannot split, for messages: scheme and what follows '@', never what precedes it."""
    scheme, _, rest = url.partition("://")
    return f"{scheme}://...@{rest.rsplit('@', 1)[1]}" if "@" in rest else redact(url)


def connect(url):
    """A psycopg connection with pgvector's types registered; DatabaseError naming the target otherwise."""
    import psycopg

    register_url(url)
    try:
        connection = psycopg.connect(url, connect_timeout=10)
    except psycopg.Error as error:
        raise DatabaseError(f"cannot connect to {describe(url)}: {redact(str(error).strip())}") from None
    try:
        from pgvector.psycopg import register_vector

        register_vector(connection)
    except psycopg.ProgrammingError:
        connection.rollback()  # The extension is created by `prepare_table`; registered again there.
    return connection


def resolve(database, database_dir, create=True):
    """(url, EmbeddedServer or None) for a --database value; starts (or joins) the embedded server when asked.

    `create=False` for a command that only reads (search, the UI): a --database_dir that is missing or holds no
    database raises NoDatabase and nothing is made there (a typo must not leave a 39 MB empty cluster).
    An EmbeddedServer returned holds a lease: call its `release()` when done.
    """
    if database == EMBEDDED:
        from beam_pipeline.database.server import EmbeddedServer, default_database_dir

        server = EmbeddedServer(database_dir or default_database_dir())
        return server.start(create=create), server
    problem = database_flag_problem(database, allow_none=False)
    if problem:
        raise DatabaseError(problem)
    return database, None
