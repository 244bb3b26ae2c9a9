"""A stored row's own embedding, to search with it: what search's `--key` and the UI's image page both ask."""


def stored_embedding(connection, table, key, dataset_id=None):
    """(embedding as NumPy, path) of a stored row; LookupError when the key is not there or names rows of two datasets.

    The key travels as a query parameter and the table as an identifier: no SQL is built from the text.
    """
    from psycopg import sql

    where = sql.SQL(" AND dataset = %s") if dataset_id else sql.SQL("")
    rows = connection.execute(sql.SQL("SELECT embedding, path, dataset FROM {} WHERE key = %s{} LIMIT 3").format(
        sql.Identifier(table), where), (key, dataset_id) if dataset_id else (key,)).fetchall()
    if not rows:
        raise LookupError(f"no row with key {key!r} in table {table}"
                          f"{f' for dataset {dataset_id}' if dataset_id else ''}")
    if len(rows) > 1:
        raise LookupError(f"key {key!r} is in {len(rows)} datasets of table {table} "
                          f"({', '.join(row[2] for row in rows)}): choose one with --dataset")
    embedding = rows[0][0]
    return (embedding.to_numpy() if hasattr(embedding, "to_numpy") else embedding), rows[0][1]
