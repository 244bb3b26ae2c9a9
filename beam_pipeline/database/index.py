"""The HNSW index on a predictions table: its settings, the memory its build gets, building it with progress.

pgvector builds an HNSW graph in memory and writes it out at the end; when the
graph outgrows `maintenance_work_mem` it switches to inserting on disk, which
is many times slower (pgvector issues #300, #504, #807: builds of hours at 10M
rows). So the build's memory is sized from the table: measured on pgvector
0.8.5, an element of the in-memory graph takes its vector's bytes plus 32 bytes
per `m` plus about 200 bytes (`build_bytes`), bounded by the memory the machine
has free. The build runs one process per core (`max_parallel_maintenance_workers`
beside the leader) and reports pg_stat_progress_create_index while it works.

Rows loaded into a table that already has its index are added to the graph by
PostgreSQL as they are inserted; nothing is rebuilt unless asked (`rebuild`).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
import time
from collections.abc import Callable

from beam_pipeline.common.embeddings import embedding_type as embedding_type_named
from beam_pipeline.common.embeddings import of_column_type
from beam_pipeline.database.connection import DatabaseError, connect, describe
from beam_pipeline.database.names import index_name
from tf_serving_input.machine import available_memory_bytes

# pgvector's own defaults, which its documentation and our recall checks are measured at.
DEFAULT_M = 16
DEFAULT_EF_CONSTRUCTION = 64
# pgvector's bounds for the two options (hnsw.c: HNSW_MIN_M .. HNSW_MAX_M, ef_construction 4 .. 1000).
M_RANGE = (2, 100)
EF_CONSTRUCTION_RANGE = (4, 1000)
# Measured (8 MiB of maintenance_work_mem, the NOTICE's tuple count): 970 B per element at 64-d and 2,763 B
# at 512-d for m = 16, +512 B for m = 32: 4 B per float32 dimension, 32 B per m, ~200 B besides.
_BYTES_PER_M = 32
_BYTES_PER_ELEMENT = 256  # The ~200 measured, rounded up: a graph a little too large is what costs hours.
_MIN_BUILD_MEMORY = 64 << 20  # PostgreSQL's own default.
MAX_BUILD_MEMORY = 2147483647 << 10  # maintenance_work_mem is at most 2147483647 kB (MAX_KILOBYTES).
# Never more than half of what the machine has free: the server, its page cache and the job need the rest.
_FREE_MEMORY_SHARE = 0.5
PROGRESS_SECONDS = 10.0


@dataclasses.dataclass(frozen=True)
class IndexSettings:
    """How the HNSW index is built: graph degree, build-time candidate list, build memory, rebuild or not."""

    m: int = DEFAULT_M
    ef_construction: int = DEFAULT_EF_CONSTRUCTION
    build_memory: int | None = None  # Bytes of maintenance_work_mem; None sizes it from the table.
    rebuild: bool = False

    def problem(self) -> str | None:
        """Why these settings cannot build an index (one line), or None."""
        if not M_RANGE[0] <= self.m <= M_RANGE[1]:
            return f"--hnsw_m must be from {M_RANGE[0]} to {M_RANGE[1]}, not {self.m}"
        if not EF_CONSTRUCTION_RANGE[0] <= self.ef_construction <= EF_CONSTRUCTION_RANGE[1]:
            return (f"--hnsw_ef_construction must be from {EF_CONSTRUCTION_RANGE[0]} to {EF_CONSTRUCTION_RANGE[1]}, "
                    f"not {self.ef_construction}")
        if self.ef_construction < 2 * self.m:
            return (f"--hnsw_ef_construction ({self.ef_construction}) must be at least twice --hnsw_m ({self.m}), "
                    "as pgvector requires")
        if self.build_memory is not None and not (1 << 20) <= self.build_memory <= MAX_BUILD_MEMORY:
            return (f"--index_build_memory must be from 1MB to {MAX_BUILD_MEMORY >> 30}GB (PostgreSQL's limit), "
                    f"not {self.build_memory} bytes")
        return None


def parse_memory(text: str) -> int | None:
    """'auto' → None (sized from the table); '512MB', '4GB', '2048kB' → bytes; ValueError otherwise."""
    if text.strip().lower() == "auto":
        return None
    units = {"kb": 1 << 10, "mb": 1 << 20, "gb": 1 << 30, "tb": 1 << 40}
    number, unit = text.strip()[:-2], text.strip()[-2:].lower()
    if unit not in units or not number.isdigit():
        raise ValueError(f"{text!r} is not a size such as 512MB or 4GB (or 'auto')")
    return int(number) * units[unit]


def build_bytes(rows: int, dimensions: int, embedding_dtype: str, m: int = DEFAULT_M) -> int:
    """Bytes pgvector's in-memory HNSW graph of `rows` embeddings takes (measured, see the module's docstring)."""
    vector_bytes = 8 + dimensions * embedding_type_named(embedding_dtype).bit_width // 8
    return rows * (vector_bytes + _BYTES_PER_M * m + _BYTES_PER_ELEMENT)


def available_memory() -> int:
    """Bytes this machine has available now (MemAvailable), or 1 GiB where /proc/meminfo cannot say."""
    return available_memory_bytes() or 1 << 30


def build_memory(rows: int, dimensions: int, embedding_dtype: str, m: int = DEFAULT_M,
                 free: int | None = None) -> int:
    """maintenance_work_mem for building the index: the whole graph plus a tenth, within half the free memory."""
    wanted = int(build_bytes(rows, dimensions, embedding_dtype, m) * 1.1)
    ceiling = int((available_memory() if free is None else free) * _FREE_MEMORY_SHARE)
    return max(_MIN_BUILD_MEMORY, min(wanted, ceiling, MAX_BUILD_MEMORY))


def build_workers() -> int:
    """Parallel workers beside the leader: one process per core in all."""
    return max(0, (os.cpu_count() or 1) - 1)


def index_definition(connection, table: str) -> str | None:
    """The definition of `table`'s HNSW index as pg_indexes gives it, or None when there is none."""
    found = connection.execute("SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema() "
                               "AND tablename = %s AND indexname = %s", (table, index_name(table))).fetchone()
    return found[0] if found else None


def drop_index(url: str, table: str) -> bool:
    """Drops `table`'s HNSW index (before a bulk load that rebuilds it); whether there was one."""
    from psycopg import sql

    from beam_pipeline.database.tables import lock_table

    with connect(url) as connection:
        with connection.transaction():
            lock_table(connection, table)
            existed = index_definition(connection, table) is not None
            connection.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(sql.Identifier(index_name(table))))
    return existed


def create_index(url: str, table: str, settings: IndexSettings | None = None,
                 progress: Callable[[str], None] | None = None) -> str:
    """Builds the HNSW cosine index if the table has none (rebuilds it when `settings.rebuild`); its definition.

    The operator class follows the table's embedding column (vector or halfvec).

    `progress` gets a line every PROGRESS_SECONDS while a build runs (the phase and tuples done).
    """
    from psycopg import sql

    from beam_pipeline.database.tables import embedding_type, lock_table

    settings = settings or IndexSettings()
    name = index_name(table)
    with connect(url) as connection:
        with connection.transaction():
            lock_table(connection, table)
            if settings.rebuild:
                connection.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(sql.Identifier(name)))
            if index_definition(connection, table) is None:
                kind = embedding_type(connection, table)
                if kind is None:
                    raise DatabaseError(f"no table {table} of embeddings in {describe(url)}")
                dimensions = int(kind.split("(")[1].rstrip(")"))
                rows = connection.execute(sql.SQL("SELECT count(*) FROM {}").format(
                    sql.Identifier(table))).fetchone()[0]
                column = of_column_type(kind)
                memory = settings.build_memory or build_memory(rows, dimensions, column.name, settings.m)
                connection.execute(sql.SQL("SET LOCAL maintenance_work_mem = {}").format(
                    sql.Literal(f"{max(1, memory >> 10)}kB")))
                connection.execute(sql.SQL("SET LOCAL max_parallel_maintenance_workers = {}").format(
                    sql.Literal(build_workers())))
                operators = column.operator_class
                statement = sql.SQL("CREATE INDEX {} ON {} USING hnsw (embedding {}) "
                                    "WITH (m = {}, ef_construction = {})").format(
                    sql.Identifier(name), sql.Identifier(table), sql.SQL(operators),
                    sql.Literal(settings.m), sql.Literal(settings.ef_construction))
                notices = []
                connection.add_notice_handler(lambda notice: notices.append(notice.message_primary or ""))
                with _reporting_progress(url, table, rows, progress):
                    connection.execute(statement)
                for notice in notices:
                    if "no longer fits into maintenance_work_mem" in notice:
                        print(f"warning: the HNSW build of table {table} ran out of its {memory >> 20} MB of memory "
                              f"({notice}) and went on many times slower: give it more with --index_build_memory",
                              file=sys.stderr, flush=True)
            connection.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(table)))
        definition = index_definition(connection, table)
    if definition is None or "USING hnsw" not in definition:
        raise DatabaseError(f"no HNSW index on table {table} in {describe(url)} after creating {name}")
    return definition


class _reporting_progress:
    """While a CREATE INDEX runs: a line from pg_stat_progress_create_index every PROGRESS_SECONDS."""

    def __init__(self, url, table, rows, progress):
        self.url, self.table, self.rows, self.progress = url, table, rows, progress
        self.done = threading.Event()
        self.thread = None

    def __enter__(self):
        if self.progress is not None:
            self.started = time.monotonic()
            self.thread = threading.Thread(target=self._poll, name="index-progress", daemon=True)
            self.thread.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        if self.thread is not None:
            self.thread.join(timeout=5)

    def _poll(self):
        try:
            with connect(self.url) as connection:
                connection.autocommit = True
                while not self.done.wait(PROGRESS_SECONDS):
                    found = connection.execute(
                        "SELECT phase, tuples_done, tuples_total FROM pg_stat_progress_create_index "
                        "WHERE relid = to_regclass(quote_ident(%s))", (self.table,)).fetchone()
                    if found and not self.done.is_set():
                        phase, done, total = found
                        total = total or self.rows
                        share = f" {done:,} of {total:,} rows ({100 * done / total:.0f}%)" if total else ""
                        self.progress(f"index: {phase}{share}, {time.monotonic() - self.started:.0f} s")
        except Exception:  # noqa: BLE001 - progress is a courtesy: its failure never fails the build.
            return
