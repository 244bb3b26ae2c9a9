"""The predictions table: DDL from the Parquet schema, what a table holds, loading (the index: `index.py`).

`--database embedded` is a real PostgreSQL server (with pgvector) in a data
folder, on a private Unix socket (`server.py`); any `postgresql://`
URL points at a standing server instead (at scale: Cloud SQL, AlloyDB).

**What a table holds.** Image keys are the job's (`inputs.rows.row_key`: the CSV
row and its path as written), so two datasets can share keys. A table's rows
are therefore keyed by (dataset, key), where the dataset id names the input
the predictions were made from (its content: the job's shard checksums, or the
CSV's content and folder). The table `beam_image_pipeline_datasets` records,
per table, every dataset loaded and the export (its SHA-256) that made the
embeddings. Loading another export into a table is refused; loading another
dataset is refused unless asked (`--append`), and then its rows sit beside the
others, never replacing them.

**Loading** is an upsert: a Parquet shard none of whose rows is stored yet is
copied (binary COPY) straight into the table; any other is copied into a
temporary staging table and merged with INSERT ... ON CONFLICT (dataset, key)
DO UPDATE, in one transaction either way, so a rerun, a resumed run or a
retried bundle leaves exactly one row per image. A row holding text
PostgreSQL cannot store (a NUL byte) is left out and reported; it never fails
the shard. Creating the table and the index runs under an advisory lock, so
concurrent loads wait for each other instead of colliding.
"""

import json

from beam_pipeline.common.embeddings import EMBEDDING_TYPES, of_bit_width
from beam_pipeline.common.embeddings import embedding_type as embedding_type_named
from beam_pipeline.common.redact import redact
from beam_pipeline.database.connection import DatabaseError, connect, describe
from beam_pipeline.database.names import (
    DATASETS_TABLE,
    MAX_NAME_BYTES,
)

# An id for the advisory lock that serializes DDL on one table (with the table's name hashed beside it).
_LOCK_NAMESPACE = 0x6269_7000


class TableRefused(DatabaseError):
    """The table cannot take these predictions (another dataset, another export, another type)."""


def lock_table(connection, table):
    """Holds, until the transaction ends, the advisory lock that serializes DDL and bookkeeping on `table`."""
    connection.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (_LOCK_NAMESPACE, table))


def embedding_type(connection, table):
    """The table's embedding column type ('vector(24)', 'halfvec(128)'), or None when there is no such table."""
    found = connection.execute(
        "SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = to_regclass(quote_ident(%s)) "
        "AND attname = 'embedding' AND NOT attisdropped", (table,)).fetchone()
    return found[0] if found else None


def vector_type(embedding_size, embedding_dtype):
    """The pgvector column type of embeddings of this size and dtype."""
    return embedding_type_named(embedding_dtype).column_type(embedding_size)


def table_columns(embedding_size, embedding_dtype):
    """[(column, PostgreSQL type)] of a predictions table: `dataset`, then the Parquet schema's columns.

    Derived from `common.predictions.schema`, so the table follows the Parquet files it loads.
    """
    from beam_pipeline.common import predictions

    return [("dataset", "text")] + [(field.name, "jsonb" if field.name in predictions.JSON_COLUMNS
                                     else _postgres_type(field.type))
                                    for field in predictions.schema(embedding_size, embedding_dtype)]


def _postgres_type(arrow_type):
    import pyarrow as pa

    if pa.types.is_fixed_size_list(arrow_type):
        return of_bit_width(arrow_type.value_type.bit_width).column_type(arrow_type.list_size)
    element = arrow_type.value_type if pa.types.is_list(arrow_type) else arrow_type
    scalar = {pa.string(): "text", pa.int32(): "int4", pa.float32(): "float4"}[element]
    return f"{scalar}[]" if pa.types.is_list(arrow_type) else scalar


def prepare_table(url, table, embedding_size, embedding_dtype, dataset, append=False):
    """Creates the extension and the table if needed and records `dataset` in it; refuses what does not fit.

    `dataset`: {"id", "source", "model_sha256", "model_dir"}. Refused (TableRefused, one line naming
    both): a table of another embedding type, one holding another export's embeddings, or, unless
    `append`, another dataset.
    """
    import psycopg
    from pgvector.psycopg import register_vector
    from psycopg import sql

    wanted = vector_type(embedding_size, embedding_dtype)
    with connect(url) as connection:
        try:
            with connection.transaction():
                # What every table shares, made once under one database-wide lock: concurrent
                # CREATE ... IF NOT EXISTS of one name collide (UniqueViolation on pg_type).
                connection.execute("SELECT pg_advisory_xact_lock(%s, 0)", (_LOCK_NAMESPACE,))
                connection.execute("CREATE EXTENSION IF NOT EXISTS vector")
        except psycopg.Error as error:
            raise DatabaseError(f"{describe(url)} has no pgvector extension (CREATE EXTENSION vector: "
                                f"{redact(str(error).strip())}); install pgvector there, or use "
                                "--database embedded") from None
        with connection.transaction():
            connection.execute("SELECT pg_advisory_xact_lock(%s, 0)", (_LOCK_NAMESPACE,))
            connection.execute(sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} (table_name text NOT NULL, dataset text NOT NULL, source text NOT NULL, "
                "model_sha256 text NOT NULL, model_dir text NOT NULL, loaded timestamptz NOT NULL DEFAULT now(), "
                "PRIMARY KEY (table_name, dataset))").format(sql.Identifier(DATASETS_TABLE)))
        register_vector(connection)
        with connection.transaction():
            lock_table(connection, table)
            if not _check_table(connection, url, table, wanted, dataset, append):
                columns = [sql.SQL("{} {} NOT NULL").format(sql.Identifier(name), sql.SQL(kind))
                           for name, kind in table_columns(embedding_size, embedding_dtype)]
                connection.execute(sql.SQL("CREATE TABLE {} ({}, PRIMARY KEY (dataset, key))").format(
                    sql.Identifier(table), sql.SQL(", ").join(columns)))
                connection.execute(sql.SQL("DELETE FROM {} WHERE table_name = %s").format(
                    sql.Identifier(DATASETS_TABLE)), (table,))  # Left by a table dropped by hand.
            connection.execute(sql.SQL(
                "INSERT INTO {} (table_name, dataset, source, model_sha256, model_dir) VALUES (%s, %s, %s, %s, %s) "
                "ON CONFLICT (table_name, dataset) DO NOTHING").format(sql.Identifier(DATASETS_TABLE)),
                (table, dataset["id"], dataset["source"], dataset["model_sha256"], dataset["model_dir"]))


def check_table_accepts(url, table, embedding_size, embedding_dtype, dataset, append=False):
    """Raises TableRefused when `table` exists and cannot take `dataset` (prepare_table's check); writes nothing.

    The predict job asks before predicting, so that a refusal costs no work.
    """
    with connect(url) as connection:
        _check_table(connection, url, table, vector_type(embedding_size, embedding_dtype), dataset, append)
        connection.rollback()


def _check_table(connection, url, table, wanted, dataset, append):
    """Whether `table` exists; TableRefused (one line naming both sides) when it cannot take `dataset`."""
    from psycopg import sql

    found = embedding_type(connection, table)
    if found is None:
        return False
    where = f"table {table} in {describe(url)}"
    if found != wanted:
        raise TableRefused(f"{where} holds embeddings of type {found}, not {wanted}: choose another --table, or "
                           "drop that one")
    holds = []
    if connection.execute("SELECT to_regclass(%s) IS NOT NULL", (DATASETS_TABLE,)).fetchone()[0]:
        holds = connection.execute(
            sql.SQL("SELECT dataset, source, model_sha256, model_dir FROM {} WHERE table_name = %s ORDER BY loaded")
            .format(sql.Identifier(DATASETS_TABLE)), (table,)).fetchall()
    if not holds:
        raise TableRefused(f"{where} was not made by this version of the predict job (it records no datasets): "
                           "choose another --table, or drop that one")
    lacking = missing_columns(connection, table)
    if lacking:
        raise TableRefused(f"{where} was made by an earlier version of the predict job (no column "
                           f"{', '.join(lacking)}): choose another --table, or drop that one and load again")
    first_id, first_source, model_sha256, model_dir = holds[0]
    if model_sha256 != dataset["model_sha256"]:
        raise TableRefused(f"{where} holds embeddings of the export {model_dir} (SHA-256 {model_sha256[:12]}), "
                           f"not of {dataset['model_dir']} (SHA-256 {dataset['model_sha256'][:12]}); embeddings "
                           "of two models cannot be searched together: choose another --table, or drop that one")
    if dataset["id"] in {row[0] for row in holds} or append:
        return True
    others = f" and {len(holds) - 1} more" if len(holds) > 1 else ""
    raise TableRefused(f"{where} holds the dataset {first_id} from {first_source}{others}, not {dataset['id']} "
                       f"from {dataset['source']}: pass --append to add it beside them (rows of two datasets "
                       "never replace each other), or choose another --table")


def datasets_in(connection, table):
    """[(dataset id, source)] of what `table` holds, in the order they were loaded."""
    from psycopg import sql

    return connection.execute(sql.SQL("SELECT dataset, source FROM {} WHERE table_name = %s ORDER BY loaded")
                              .format(sql.Identifier(DATASETS_TABLE)), (table,)).fetchall()


def table_export(connection, table):
    """(SHA-256, folder) of the export whose embeddings `table` holds, or None when it records none."""
    from psycopg import sql

    if not connection.execute("SELECT to_regclass(%s) IS NOT NULL", (DATASETS_TABLE,)).fetchone()[0]:
        return None
    return connection.execute(sql.SQL("SELECT model_sha256, model_dir FROM {} WHERE table_name = %s ORDER BY loaded "
                                      "LIMIT 1").format(sql.Identifier(DATASETS_TABLE)), (table,)).fetchone()


# ---------------------------------------------------------------------- loading
def unstorable_rows(values, columns):
    """{row index: detail} of rows holding text PostgreSQL cannot store (a NUL byte), in any text column.

    `values`: {column: Python values} (as `to_pylist` gives them); `columns`: [(column, PostgreSQL type)].
    """
    from beam_pipeline.common.kept_columns import holds_nul

    found = {}
    for name, kind in columns:
        if kind not in ("text", "text[]", "jsonb") or name not in values:
            continue
        for index, value in enumerate(values[name]):
            nul = (holds_nul(json.loads(value)) if kind == "jsonb" else
                   "\x00" in (value if kind == "text" else "".join(value)))
            if nul:
                found.setdefault(index, f"its {name} holds a NUL byte, which PostgreSQL text cannot store")
    return found


def _any_stored(connection, target, dataset_id, keys):
    """Whether the table holds any of `keys` of this dataset (one probe of its primary key per key)."""
    from psycopg import sql

    return connection.execute(sql.SQL("SELECT EXISTS (SELECT 1 FROM {} WHERE dataset = %s AND key = ANY(%s))").format(
        target), (dataset_id, keys)).fetchone()[0]


def _as_is(text):
    """The `columns` cell is JSON text already: sent to jsonb as it is, not encoded again."""
    return text


def upsert_table(connection, table, dataset_id, arrow_table):
    """Upserts an Arrow table of predictions (prediction_shards' schema) in one transaction.

    Returns (rows upserted, {row index: why it was left out}).
    """
    from psycopg import errors, sql
    from psycopg.types.json import Jsonb

    embeddings = arrow_table.column("embedding").combine_chunks()
    kind = of_bit_width(embeddings.type.value_type.bit_width)
    columns = table_columns(embeddings.type.list_size, kind.name)
    values = {name: arrow_table.column(name).to_pylist() for name, _ in columns[1:-1]}  # Converted once.
    left_out = unstorable_rows(values, columns)
    # In key order, on both paths: concurrent loads of overlapping rows then take their key locks in one order
    # (a direct COPY in shard order deadlocked against an upsert of the same keys).
    keep = sorted((index for index in range(len(arrow_table)) if index not in left_out),
                  key=lambda index: values["key"][index])
    if not keep:  # An empty shard (more shards than rows), or nothing storable: nothing to send.
        return 0, left_out

    stage = sql.Identifier(f"stage_{table}"[:MAX_NAME_BYTES])
    target = sql.Identifier(table)
    names = sql.SQL(", ").join(sql.Identifier(name) for name, _ in columns)
    updates = sql.SQL(", ").join(sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(name))
                                 for name, _ in columns[2:])
    matrix = embeddings.values.to_numpy(zero_copy_only=False).reshape(len(arrow_table), -1)

    def copy_rows(into):
        with connection.cursor().copy(sql.SQL("COPY {} ({}) FROM STDIN WITH (FORMAT BINARY)").format(
                into, names)) as copy:
            copy.set_types([kind.pgvector if name == "embedding" else type_ for name, type_ in columns])
            text_and_lists = [[Jsonb(value, dumps=_as_is) for value in values[name]] if type_ == "jsonb"
                              else values[name] for name, type_ in columns[1:-1]]
            to_database = kind.to_database
            for row in keep:
                copy.write_row([dataset_id, *(column[row] for column in text_and_lists), to_database(matrix[row])])

    with connection.transaction():
        if not _any_stored(connection, target, dataset_id, [values["key"][row] for row in keep]):
            # None of these rows is stored yet (a first load, the usual case): COPY straight into the table,
            # each row written once instead of into a staging table and again by the upsert (1.21x). A
            # concurrent load of the same rows makes this COPY fail on the key (or deadlock on it): the
            # savepoint takes it back and the upsert below does the work.
            try:
                with connection.transaction():
                    copy_rows(target)
                return len(keep), left_out
            except (errors.UniqueViolation, errors.DeadlockDetected):
                pass
        connection.execute(sql.SQL("CREATE TEMP TABLE IF NOT EXISTS {} (LIKE {}) ON COMMIT DELETE ROWS").format(
            stage, target))
        copy_rows(stage)
        # In key order: two loads of the same rows at once then take their row locks in one order. A row that
        # is already stored as it is now is left alone: a rerun writes nothing, and adds nothing to the index.
        changed = sql.SQL("({}) IS DISTINCT FROM ({})").format(
            sql.SQL(", ").join(sql.SQL("{}.{}").format(target, sql.Identifier(name)) for name, _ in columns[2:]),
            sql.SQL(", ").join(sql.SQL("EXCLUDED.{}").format(sql.Identifier(name)) for name, _ in columns[2:]))
        connection.execute(sql.SQL("INSERT INTO {} ({}) SELECT {} FROM {} ORDER BY key "
                                   "ON CONFLICT (dataset, key) DO UPDATE SET {} WHERE {}").format(
            target, names, names, stage, updates, changed))
    return len(keep), left_out


def count_rows(url, table, dataset_id=None):
    """Rows in `table` (of one dataset when `dataset_id` is given)."""
    from psycopg import sql

    with connect(url) as connection:
        if dataset_id is None:
            return connection.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table))).fetchone()[0]
        return connection.execute(sql.SQL("SELECT count(*) FROM {} WHERE dataset = %s").format(
            sql.Identifier(table)), (dataset_id,)).fetchone()[0]


# The columns a search reads from a predictions table, besides its `embedding` (`neighbours.py`, `stored.py`).
SEARCHED_COLUMNS = ("dataset", "key", "source", "path", "label", "labels", "columns")


def missing_columns(connection, table):
    """The columns a search reads that `table` lacks: none for a table the predict job made (`table_columns`).

    A table that merely has an `embedding` column (made by hand, or by another program) is not one to search:
    its search would fail on the first column it lacks.
    """
    found = {name for (name,) in connection.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = to_regclass(quote_ident(%s)) AND attnum > 0 "
        "AND NOT attisdropped", (table,))}
    return [name for name in SEARCHED_COLUMNS if name not in found]


def not_predictions_table(table, missing):
    """The one line that refuses searching `table`, which lacks the `missing` columns."""
    if set(missing) <= {"labels", "columns"}:
        return (f"table {table} was loaded by an earlier version of the predict job (no column "
                f"{', '.join(missing)}): load the predictions again into a new --table")
    return (f"table {table} has embeddings but is not a predictions table (no column {', '.join(missing)}): name a "
            "table the predict job loaded")


def vector_tables(url):
    """Predictions tables: an 'embedding' column of one of the embedding types (vector, halfvec), and every
    column a search reads (`SEARCHED_COLUMNS`)."""
    pattern = "^(" + "|".join(kind.pgvector for kind in EMBEDDING_TYPES.values()) + ")\\("
    with connect(url) as connection:
        names = [name for (name,) in connection.execute(
            "SELECT c.relname FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE a.attname = 'embedding' AND c.relkind = 'r' AND n.nspname = current_schema() "
            "AND format_type(a.atttypid, a.atttypmod) ~ %s ORDER BY 1", (pattern,))]
        return [name for name in names if not missing_columns(connection, name)]
