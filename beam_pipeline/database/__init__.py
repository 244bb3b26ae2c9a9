"""The database every job shares: PostgreSQL + pgvector tables of predictions (`tables`) and the embedded server
(`server`). The predict job loads into it; search (and later the UI) query it.

`from beam_pipeline import database` gives the connection, naming and table functions, as before the package existed.
"""

from beam_pipeline.database.connection import (
    EMBEDDED,
    NONE,
    DatabaseError,
    connect,
    database_flag_problem,
    describe,
    describe_unparsed,
    resolve,
)
from beam_pipeline.database.names import (
    DATASETS_TABLE,
    INDEX_SUFFIX,
    MAX_NAME_BYTES,
    TableNameError,
    check_table_name,
    index_name,
    table_name,
)
from beam_pipeline.database.pool import open_pool
from beam_pipeline.database.stored import stored_embedding
from beam_pipeline.database.tables import (
    MAX_K,
    MIN_EF_SEARCH,
    TableRefused,
    check_table_accepts,
    count_rows,
    create_index,
    datasets_in,
    embedding_type,
    index_definition,
    nearest,
    prepare_table,
    table_columns,
    table_export,
    unstorable_rows,
    upsert_table,
    vector_tables,
    vector_type,
)

__all__ = [
    "EMBEDDED",
    "NONE",
    "DATASETS_TABLE",
    "MAX_NAME_BYTES",
    "INDEX_SUFFIX",
    "MAX_K",
    "MIN_EF_SEARCH",
    "DatabaseError",
    "TableRefused",
    "TableNameError",
    "describe",
    "database_flag_problem",
    "describe_unparsed",
    "check_table_name",
    "table_name",
    "index_name",
    "connect",
    "embedding_type",
    "vector_type",
    "table_columns",
    "prepare_table",
    "check_table_accepts",
    "datasets_in",
    "table_export",
    "unstorable_rows",
    "upsert_table",
    "create_index",
    "index_definition",
    "count_rows",
    "vector_tables",
    "nearest",
    "resolve",
    "open_pool",
    "stored_embedding",
]
