"""Similarity search over the predict job's table: `python -m beam_pipeline.search (--image FILE | --key KEY)`.

The query image is embedded by the same serving export (its `serving_default`
signature: the job's preprocessing, then the model), normalized like the stored
embeddings, and pgvector's HNSW index returns the nearest rows by cosine
distance. `--key` searches with a stored image's own embedding instead.
"""

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def build_parser():
    parser = argparse.ArgumentParser(
        prog="python -m beam_pipeline.search",
        description="Find the stored images nearest a query image (or a stored image's key) by embedding.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    query = parser.add_mutually_exclusive_group(required=True)
    query.add_argument("--image", help="An image file to search with (embedded by --model_dir).")
    query.add_argument("--key", help="The key of a stored image to search with (its stored embedding).")
    parser.add_argument("--model_dir", help="The serving export the predictions came from (needed with --image).")
    parser.add_argument("--database", default="embedded", help="'embedded' or a postgresql:// URL.")
    parser.add_argument("--database_dir", default=None, help="The embedded server's data folder.")
    parser.add_argument("--table", default=None,
                        help="The predictions table (default: the only one with embeddings in the database).")
    parser.add_argument("-k", type=int, default=8, help="How many neighbours.")
    parser.add_argument("--contact_sheet", help="Write a PNG of the query beside its neighbours here.")
    return parser


def embed_image(model_dir, data):
    """The unit-length embedding the export gives one image's bytes (as the predict job stores it)."""
    import tensorflow as tf

    from beam_pipeline.vectors import l2_normalize

    serve = tf.saved_model.load(model_dir).signatures["serving_default"]
    return l2_normalize(serve(image_bytes=tf.constant([data]))["embedding"].numpy())[0]


def stored_embedding(connection, table, key):
    """(embedding, path) of a stored row; LookupError when the key is not there."""
    from psycopg import sql

    row = connection.execute(sql.SQL("SELECT embedding, path FROM {} WHERE key = %s").format(
        sql.Identifier(table)), (key,)).fetchone()
    if row is None:
        raise LookupError(f"no row with key {key!r} in table {table}")
    embedding = row[0]
    return (embedding.to_numpy() if hasattr(embedding, "to_numpy") else embedding), row[1]


def thumbnail(path, size=128):
    """An image file as a size x size RGB array, through the project's own preprocessing; gray if unreadable."""
    import numpy as np

    from beam_pipeline.row_preprocessor import read_image_bytes
    from tf_serving_input.features import PreprocessConfig
    from tf_serving_input.preprocessing import preprocess_image

    try:
        return preprocess_image(read_image_bytes(path), PreprocessConfig(image_size=size)).numpy()
    except Exception:  # noqa: BLE001 - a neighbour whose file is gone still gets its caption.
        return np.full((size, size, 3), 200, np.uint8)


def run(argv=None):
    """Runs one search; prints the neighbours; returns the exit code."""
    args = build_parser().parse_args(argv)
    if args.image and not args.model_dir:
        print("error: --image needs --model_dir (the export that embeds the query)", file=sys.stderr)
        return 2
    from beam_pipeline import database

    try:
        url, server = database.resolve(args.database, args.database_dir)
    except database.DatabaseError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    try:
        return _search(args, url)
    except (database.DatabaseError, LookupError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    finally:
        if server is not None:
            server.stop_if_started_here()


def _search(args, url):
    from beam_pipeline import database

    table = args.table
    if table is None:
        tables = database.vector_tables(url)
        if len(tables) != 1:
            raise database.DatabaseError(f"{database.describe(url)} holds {len(tables)} tables of embeddings "
                                         f"({', '.join(tables) or 'none'}): name one with --table")
        table = tables[0]
    with database.connect(url) as connection:
        if args.key:
            vector, query_path = stored_embedding(connection, table, args.key)
        else:
            with open(args.image, "rb") as f:
                vector, query_path = embed_image(args.model_dir, f.read()), args.image
        neighbours = database.nearest(connection, table, vector, args.k)
    print(f"{len(neighbours)} nearest to {args.key or args.image} in {table} (cosine distance):")
    for rank, (key, source, _, label, distance) in enumerate(neighbours, start=1):
        print(f"{rank:3d}  {distance:.4f}  {key}  {label or '-':<12} {source}")
    if args.contact_sheet:
        from beam_pipeline.inspect import render_contact_sheet

        tiles = [(thumbnail(query_path), "query", query_path)]
        tiles += [(thumbnail(path), f"{rank} {label} {distance:.3f}", path)
                  for rank, (_, _, path, label, distance) in enumerate(neighbours, start=1)]
        render_contact_sheet(tiles, args.contact_sheet, columns=min(len(tiles), 9))
        print(f"contact sheet: {args.contact_sheet}")
    return 0


def main():
    """Console-script entry point."""
    sys.exit(run())


if __name__ == "__main__":
    sys.exit(run())
