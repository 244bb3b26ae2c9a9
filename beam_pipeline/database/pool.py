"""A pool of connections for a long-running reader (the UI): opened once, pgvector's types on each."""

from beam_pipeline.common.redact import register_url
from beam_pipeline.database.connection import DatabaseError, describe


def open_pool(url, max_size=4, timeout=10):
    """A psycopg_pool.ConnectionPool on `url`, opened and checked; DatabaseError naming the target otherwise.

    Use `with pool.connection() as connection:`; close it with `pool.close()`.
    """
    from pgvector.psycopg import register_vector
    from psycopg_pool import ConnectionPool

    register_url(url)
    pool = ConnectionPool(url, min_size=1, max_size=max_size, timeout=timeout, open=False,
                          kwargs={"connect_timeout": 10}, configure=register_vector)
    try:
        pool.open(wait=True, timeout=timeout)
    except Exception as error:  # noqa: BLE001 - psycopg_pool raises its own PoolTimeout; psycopg its errors.
        pool.close()
        raise DatabaseError(f"cannot connect to {describe(url)}: {type(error).__name__}") from None
    return pool
