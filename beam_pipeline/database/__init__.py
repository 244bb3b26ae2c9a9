"""The database every job shares: PostgreSQL + pgvector tables of predictions (`tables`), their HNSW index
(`index`), nearest-neighbour queries (`neighbours`) and the embedded server (`server`). The predict job loads
into it; search (and later the UI) query it.

`from beam_pipeline import database` gives the connection, naming and table functions, as before the package existed.
"""

from beam_pipeline.database.connection import (
    EMBEDDED,
    NONE,
    DatabaseError,
    NoDatabase,
    connect,
    database_flag_problem,
    describe,
    describe_unparsed,
    resolve,
)
from beam_pipeline.database.index import (
    DEFAULT_EF_CONSTRUCTION,
    DEFAULT_M,
    IndexSettings,
    build_memory,
    create_index,
    drop_index,
    index_definition,
    parse_memory,
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
from beam_pipeline.database.neighbours import (
    DEFAULT_EF_SEARCH,
    MAX_EF_SEARCH,
    MAX_K,
    MIN_EF_SEARCH,
    check_query,
    ef_search_for,
    nearest,
)
from beam_pipeline.database.pool import open_pool
from beam_pipeline.database.stored import stored_embedding
from beam_pipeline.database.tables import (
    TableRefused,
    check_table_accepts,
    count_rows,
    datasets_in,
    embedding_type,
    missing_columns,
    not_predictions_table,
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
    "MAX_EF_SEARCH",
    "MIN_EF_SEARCH",
    "DEFAULT_EF_SEARCH",
    "DEFAULT_M",
    "DEFAULT_EF_CONSTRUCTION",
    "IndexSettings",
    "build_memory",
    "parse_memory",
    "drop_index",
    "check_query",
    "ef_search_for",
    "DatabaseError",
    "NoDatabase",
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
    "missing_columns",
    "not_predictions_table",
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
