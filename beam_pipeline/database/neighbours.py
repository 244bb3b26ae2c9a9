"""Nearest neighbours by cosine distance: the HNSW index at a known recall, filters that still return k rows.

`hnsw.ef_search` is the candidate list HNSW keeps while searching: recall rises
with it, and so does the time. pgvector's default (40) gave recall@10 of 0.90
on 8,000 256-d embeddings of similar images; DEFAULT_EF_SEARCH (100) is what
our checks at several thousand rows (tests/database) and the benchmark's 100,000
clustered vectors hold >= 0.95 at.

A filter (split, label, dataset) is applied to what the index returns, so a
plain index scan can come back with fewer than k rows (pgvector #259, #719).
pgvector 0.8's iterative scan (`hnsw.iterative_scan = relaxed_order`) keeps
scanning until k rows pass the filter, or until `hnsw.max_scan_tuples`; its
rows are sorted by distance again afterwards.
When even that finds fewer than k and the filter matches more, the query is
answered exactly (a scan of the matching rows), so a filtered search returns k
rows whenever k exist.
"""

from __future__ import annotations

from typing import Any

from beam_pipeline.common.embeddings import of_column_type
from beam_pipeline.database.column_filters import ColumnFilter
from beam_pipeline.database.connection import DatabaseError

# hnsw.ef_search is at most 1000: k beyond it cannot be served by the index.
MAX_K = 1000
MAX_EF_SEARCH = 1000
DEFAULT_EF_SEARCH = 100
# Kept for callers of the time before --ef_search: the default is also the least the index is asked for.
MIN_EF_SEARCH = DEFAULT_EF_SEARCH
# The columns a search may be filtered on (values are always query parameters, never SQL text).
FILTER_COLUMNS = ("dataset", "split", "label")


def ef_search_for(k: int, ef_search: int | None = None) -> int:
    """The hnsw.ef_search a k-nearest query runs at: as asked, else the default (and at least 2k, at most 1000)."""
    if ef_search is not None:
        return ef_search
    return min(MAX_EF_SEARCH, max(DEFAULT_EF_SEARCH, 2 * k))


def check_query(k: int, ef_search: int | None = None) -> None:
    """ValueError (one line) when k or ef_search cannot make a query."""
    if not 1 <= k <= MAX_K:
        raise ValueError(f"k must be between 1 and {MAX_K}, not {k}")
    if ef_search is not None and not k <= ef_search <= MAX_EF_SEARCH:
        raise ValueError(f"ef_search must be from k ({k}: the index returns at most ef_search rows) to "
                         f"{MAX_EF_SEARCH}, not {ef_search}")


def nearest(connection, table: str, vector: Any, k: int, exact: bool = False, dataset_id: str | None = None,
            explain: bool = False, ef_search: int | None = None, split: str | None = None,
            label: str | None = None, exact_fallback: bool = True, with_dataset: bool = False,
            where: tuple[ColumnFilter, ...] = ()) -> Any:
    """The k rows nearest `vector` by cosine distance: [(key, source, path, label, distance)], nearest first.

    `with_dataset`: [(key, source, path, label, dataset, distance)] (a table loaded with --append holds several).

    Uses the HNSW index at `ef_search` (see `ef_search_for`) unless `exact`. `dataset_id`, `split` and `label`
    keep only rows with those values (a label also matches one label of a multi-label image), and so do the
    kept-column filters `where` (`column_filters.py`); k rows come back when k exist (`exact_fallback=False`: only what
    the iterative index scan finds). `explain`: the plan PostgreSQL
    chooses for this very query, as text, instead of its rows.
    """
    from psycopg import sql

    check_query(k, ef_search)
    from beam_pipeline.database.tables import embedding_type

    kind = embedding_type(connection, table)
    if kind is None:
        raise DatabaseError(f"no table {table} with embeddings here")
    conditions = [(sql.SQL("{} = %s").format(sql.Identifier(name)), [value])
                  for name, value in zip(FILTER_COLUMNS, (dataset_id, split)) if value is not None]
    if label is not None:
        conditions.append((sql.SQL("(label = %s OR %s = ANY(labels))"), [label, label]))
    conditions += [column_filter.sql() for column_filter in where]
    filters = [parameter for _, parameters in conditions for parameter in parameters]
    cast = sql.SQL(of_column_type(kind).pgvector)
    where_sql = sql.SQL("")
    if conditions:
        where_sql = sql.SQL("WHERE ") + sql.SQL(" AND ").join(condition for condition, _ in conditions)
    columns = sql.SQL("key, source, path, label, dataset" if with_dataset else "key, source, path, label")
    query = sql.SQL("SELECT {}, embedding <=> %s::{} AS distance FROM {} {} "
                    "ORDER BY embedding <=> %s::{} LIMIT %s").format(columns, cast, sql.Identifier(table), where_sql,
                                                                      cast)
    parameters = [vector, *filters, vector, k]
    with connection.transaction():
        connection.execute(sql.SQL("SET LOCAL hnsw.ef_search = {}").format(sql.Literal(ef_search_for(k, ef_search))))
        if conditions:
            connection.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
        if exact:
            connection.execute("SET LOCAL enable_indexscan = off")
        if explain:
            return "\n".join(row[0] for row in connection.execute(sql.SQL("EXPLAIN ") + query, parameters))
        rows = connection.execute(query, parameters).fetchall()
        short = conditions and exact_fallback and not exact and len(rows) < k
        if short and _matching(connection, table, where_sql, filters, k) > len(rows):
            # The iterative scan stopped at hnsw.max_scan_tuples before k rows passed the filter.
            connection.execute("SET LOCAL enable_indexscan = off")
            connection.execute("SET LOCAL enable_seqscan = on")
            rows = connection.execute(query, parameters).fetchall()
    # Iterative scans return rows in relaxed order. Sorted here, not by an outer ORDER BY over a CTE as
    # pgvector's documentation shows: PostgreSQL 18 takes the CTE's own ORDER BY as the order and drops the sort.
    return sorted(rows, key=lambda row: row[-1]) if conditions else rows


def _matching(connection, table, where, filters, k):
    """How many rows match the filters, counting no further than k."""
    from psycopg import sql

    return connection.execute(sql.SQL("SELECT count(*) FROM (SELECT 1 FROM {} {} LIMIT %s) AS matching").format(
        sql.Identifier(table), where), [*filters, k]).fetchone()[0]
