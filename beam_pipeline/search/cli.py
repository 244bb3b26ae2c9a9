"""Similarity search over the predict job's table: `beam-image-pipeline search (--image FILE | --key KEY)`.

The query image is embedded by the same serving export (its `serving_default`
signature: the job's preprocessing, then the model), normalized like the stored
embeddings, and pgvector's HNSW index returns the nearest rows by cosine
distance. `--key` searches with a stored image's own embedding instead.
"""

import os
import sys

from beam_pipeline.common import flags, terminal

PROG = "beam-image-pipeline search"
DATASET_WIDTH = 40  # A dataset's source (its job folder) in a row of the text answer.


def build_parser(prog=PROG):
    """The search command's flags."""
    parser = flags.new_parser(
        prog=prog,
        description="Find the stored images nearest a query image (or a stored image's key) by embedding. Every "
                    "bad input (a missing or non-image file, a bad -k, a missing table, an export whose "
                    "embedding does not fit the table) is one line on stderr and a non-zero exit.")
    query = parser.add_mutually_exclusive_group(required=True)
    query.add_argument("--image", help="An image file to search with (embedded by --model_dir).")
    query.add_argument("--key", help="The key of a stored image to search with (its stored embedding).")
    parser.add_argument("--model_dir", help="The serving export the predictions came from (needed with --image).")
    parser.add_argument("--image_step", action="append", default=[], metavar="SPEC",
                        help="FILE.py:FUNCTION (or package.module:FUNCTION): one of the run's --image_step steps, "
                             "given once per step, in order, when --model_dir takes images after them (a run with a "
                             "Python step). Loaded only when its SHA-256 is the one the export records; never loaded "
                             "from what a run or an export names (docs/steps.md).")
    parser.add_argument("--database", default="embedded", help="'embedded' or a postgresql:// URL.")
    parser.add_argument("--database_dir", default=None, help="The embedded server's data folder.")
    parser.add_argument("--table", default=None,
                        help="The predictions table (default: the only one with embeddings in the database).")
    parser.add_argument("--dataset", default=None,
                        help="Only rows of this dataset id (a table loaded with --append holds several; the "
                             "predict manifest's database.dataset names each).")
    parser.add_argument("-k", type=int, default=8, help="How many neighbours, 1 to 1000.")
    parser.add_argument("--split", default=None,
                        help="Only images of this split (such as train or validation). Filtered searches still "
                             "return k rows whenever k exist (pgvector's iterative index scan, then an exact scan).")
    parser.add_argument("--label", default=None, help="Only images of this label (as the CSV wrote it; in a "
                        "multi-label run, images holding this label among theirs).")
    parser.add_argument("--where", action="append", default=[], metavar="NAME=VALUE",
                        help="Only images whose kept column (the job's --column) matches: NAME=VALUE (a text value, "
                             "one label of a labels column, or a number), or NAME<NUMBER, <=, >, >= (numbers). "
                             "Repeatable: all must hold.")
    parser.add_argument("--ef_search", type=int, default=None,
                        help="HNSW candidate list (k to 1000): higher finds more of the true neighbours, slower. "
                             "Default: 100 (or 2k when larger), which held recall@10 >= 0.95 against exact search "
                             "in our measurements.")
    parser.add_argument("--exact", action="store_true",
                        help="Exact search (every row compared, no index): the reference recall is measured "
                             "against; slow on large tables.")
    parser.add_argument("--format", choices=("text", "json"), default="text",
                        help="text: a table for people; json: one JSON object on stdout for programs (the query, "
                             "the table, and per neighbour its rank, key, source, path, label and "
                             "distance).")
    parser.add_argument("--max_file_bytes", type=int, default=None,
                        help="Refuse a larger --image without reading it whole (default: the job's, 256 MiB).")
    parser.add_argument("--contact_sheet", help="Write a PNG of the query beside its neighbours here.")
    flags.add_verbose_flag(parser)
    return parser


class SearchError(RuntimeError):
    """The search cannot be made as asked; the message says why in one line."""


class SearchRefused(SearchError):
    """Bad input, refused like a bad flag (exit 2): no table named when several hold embeddings, a table or
    key that is not there, a key that needs --dataset."""


def read_query_image(path, max_file_bytes=None):
    """The bytes of a query image file; SearchError with the job's reason code when it cannot be one."""
    from beam_pipeline.inputs.rows import DEFAULT_MAX_FILE_BYTES, read_image_bytes
    from tf_serving_input import failures, formats

    try:
        data = read_image_bytes(path, max_file_bytes or DEFAULT_MAX_FILE_BYTES)
    except failures.RowFailure as failure:
        raise SearchError(f"--image {path}: {failure.reason}: {failure.detail}") from None
    if formats.sniff(data) is None:
        raise SearchError(f"--image {path}: {failures.NOT_AN_IMAGE}: no known image format")
    return data


def embed_image(model_dir, data, source="the query", step_specs=()):
    """The unit-length embedding the export gives one image's bytes (as the predict job stores it).

    One implementation with the UI's: `common.query_embedding`; here its refusals become one-line SearchErrors
    (SearchRefused when the run's steps must be named with --image_step).
    """
    from beam_pipeline.common.query_embedding import ExportError, QueryEmbedder, StepsNeeded
    from tf_serving_input import failures

    try:
        return QueryEmbedder(model_dir, step_specs).embed(data)
    except StepsNeeded as error:
        raise SearchRefused(str(error)) from None
    except ExportError as error:
        raise SearchError(f"--model_dir {error}") from None
    except failures.RowFailure as failure:
        raise SearchError(f"--image {source}: {failure.reason}: {failure.detail}") from None


def thumbnail(path, size=128):
    """An image file as a size x size RGB array, through the project's own preprocessing; gray if unreadable."""
    import numpy as np

    from beam_pipeline.inputs.rows import read_image_bytes
    from tf_serving_input.features import PreprocessConfig
    from tf_serving_input.preprocessing import preprocess_image

    try:
        return preprocess_image(read_image_bytes(path), PreprocessConfig(image_size=size)).numpy()
    except Exception:  # noqa: BLE001 - a neighbour whose file is gone still gets its caption.
        return np.full((size, size, 3), 200, np.uint8)


def run(argv=None, prog=PROG):
    """Runs one search; prints the neighbours; returns the exit code (0 found, 1 failed, 2 bad flags or
    bad input: no table or key to search with)."""
    args = flags.parse_flags(build_parser(prog), sys.argv[1:] if argv is None else argv)
    from beam_pipeline import database
    from beam_pipeline.common.redact import redact

    refusal = _refusal(args)
    if refusal:
        print(f"error: {refusal}", file=sys.stderr)
        return 2

    try:
        query = read_query_image(args.image, args.max_file_bytes) if args.image else None
        url, server = database.resolve(args.database, args.database_dir, create=False)
    except database.NoDatabase as error:  # A mistyped --database_dir: bad input, and nothing was created.
        print(redact(f"error: {error}"), file=sys.stderr)
        return 2
    except (database.DatabaseError, SearchError) as error:
        print(redact(f"error: {error}"), file=sys.stderr)
        return 1
    try:
        return _search(args, url, query)
    except (SearchRefused, LookupError) as error:  # LookupError: stored_embedding found no such key (or two).
        print(redact(f"error: {error}"), file=sys.stderr)
        return 2
    except (database.DatabaseError, SearchError) as error:
        print(redact(f"error: {error}"), file=sys.stderr)
        return 1
    finally:
        if server is not None:
            server.release()


def _refusal(args):
    """Why the flags cannot make a search (one line), or None."""
    from beam_pipeline import database

    if args.image and not args.model_dir:
        return "--image needs --model_dir (the export that embeds the query)"
    if args.image_step and not args.image:
        return "--image_step applies the run's steps to --image: give --image"
    problem = database.database_flag_problem(args.database, allow_none=False)
    if problem:
        return problem
    if args.contact_sheet:
        folder = os.path.dirname(os.path.abspath(args.contact_sheet))
        if not args.contact_sheet.lower().endswith(".png") or os.path.isdir(args.contact_sheet):
            return f"--contact_sheet {args.contact_sheet} must name a .png file"
        if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
            return f"--contact_sheet {args.contact_sheet}: the folder {folder} does not exist or is not writable"
    if not 1 <= args.k <= database.MAX_K:
        return f"-k must be from 1 to {database.MAX_K} (the most the HNSW index serves), not {args.k}"
    if args.exact and args.ef_search is not None:
        return "--ef_search tunes the index, which --exact does not use: give one of them"
    if args.ef_search is not None and not args.k <= args.ef_search <= database.MAX_EF_SEARCH:
        return (f"--ef_search must be from -k ({args.k}) to {database.MAX_EF_SEARCH}, not {args.ef_search} (the "
                "index returns at most ef_search rows)")
    for flag, value in (("--split", args.split), ("--label", args.label), ("--dataset", args.dataset)):
        if value is not None and ("\x00" in value or not value.strip() and flag != "--label"):
            return f"{flag} {value!r}: not a value a row can hold"
    from beam_pipeline.database.column_filters import parse_where

    try:
        args.where_filters = tuple(parse_where(text) for text in args.where)
    except ValueError as error:
        return str(error)
    if args.table is not None:
        try:
            database.check_table_name(args.table)
        except database.TableNameError as error:
            return f"--table: {error}"
    return None


def _search(args, url, query):
    from beam_pipeline import database
    from beam_pipeline.common.files import export_sha256

    table = args.table
    if table is None:
        tables = database.vector_tables(url)
        if len(tables) != 1:
            raise SearchRefused(f"{database.describe(url)} holds {len(tables)} tables of embeddings "
                                f"({', '.join(tables) or 'none'}): name one with --table")
        table = tables[0]
    with database.connect(url) as connection:
        kind = database.embedding_type(connection, table)
        if kind is None:
            tables = database.vector_tables(url)
            raise SearchRefused(f"no table {table} of embeddings in {database.describe(url)} (tables of "
                                f"embeddings there: {', '.join(tables) or 'none'})")
        missing = database.missing_columns(connection, table)
        if missing:
            raise SearchRefused(database.not_predictions_table(table, missing))
        if args.key:
            vector, query_path = database.stored_embedding(connection, table, args.key, args.dataset)
        else:
            vector, query_path = embed_image(args.model_dir, query, args.image, args.image_step), args.image
            size = int(kind.split("(")[1].rstrip(")"))
            if len(vector) != size:
                raise SearchError(f"--model_dir {args.model_dir} embeds into {len(vector)} values, but table {table} "
                                  f"holds {kind}: use the export its predictions came from")
            recorded = database.table_export(connection, table)
            if recorded is not None and recorded[0] != export_sha256(args.model_dir):
                raise SearchError(f"table {table} holds embeddings of the export {recorded[1]} (SHA-256 "
                                  f"{recorded[0][:12]}), not of {args.model_dir}: search with the export its "
                                  "predictions came from")
        neighbours = database.nearest(connection, table, vector, args.k, exact=args.exact, dataset_id=args.dataset,
                                      ef_search=args.ef_search, split=args.split, label=args.label,
                                      with_dataset=True, where=args.where_filters)
        datasets = dict(database.datasets_in(connection, table))  # {id: source}: what names each dataset.
    if args.contact_sheet:
        from beam_pipeline.common.contact_sheet import render_contact_sheet

        tiles = [(thumbnail(query_path), "query", query_path)]
        tiles += [(thumbnail(path), f"{rank} {label} {distance:.3f}", path)
                  for rank, (_, _, path, label, _, distance) in enumerate(neighbours, start=1)]
        try:
            render_contact_sheet(tiles, args.contact_sheet, columns=min(len(tiles), 9))
        except (OSError, ValueError) as error:
            raise SearchError(f"--contact_sheet {args.contact_sheet} could not be written: {error}") from None
    if args.format == "json":
        terminal.print_json(_as_json(args, table, neighbours, datasets))
        return 0
    terminal.result(format_neighbours(args, table, neighbours, datasets if len(datasets) > 1 else None))
    if args.contact_sheet:
        terminal.result(f"contact sheet: {terminal.shown(args.contact_sheet, terminal.PATH_WIDTH)}")
    return 0


def format_neighbours(args, table, neighbours, datasets=None):
    """The neighbours as a table for a terminal: stored text escaped and cut (`terminal.shown`).

    `datasets` ({id: source}, given when the table holds several): each row names its dataset, by its id and
    the folder (or CSV) it was made from.
    """
    asked = (("split", args.split), ("label", args.label), ("dataset", args.dataset))
    filters = ", ".join([f"{name} {terminal.shown(value)!r}" for name, value in asked if value is not None]
                        + [terminal.shown(str(where)) for where in getattr(args, "where_filters", ())])
    query = terminal.shown(args.key or args.image, terminal.PATH_WIDTH)
    lines = [f"{len(neighbours)} nearest to {query} in {table}{f' ({filters})' if filters else ''} "
             "(cosine distance):"]
    for rank, (key, source, _, label, dataset, distance) in enumerate(neighbours, start=1):
        named = terminal.shown(datasets.get(dataset), DATASET_WIDTH) if datasets else ""
        column = f"{terminal.shown(dataset, 16):<16} {named:<{DATASET_WIDTH}}  " if datasets else ""
        lines.append(f"{rank:3d}  {distance:.4f}  {column}{key}  {terminal.shown(label) or '-':<12} "
                     f"{terminal.shown(source, terminal.PATH_WIDTH)}")
    return "\n".join(lines)


def _as_json(args, table, neighbours, datasets):
    """The search's answer for programs: what was asked, and the neighbours nearest first."""
    from beam_pipeline import database

    return {
        "query": {"key": args.key, "image": args.image}, "table": table, "k": args.k,
        "contact_sheet": args.contact_sheet,
        "filters": {"split": args.split, "label": args.label, "dataset": args.dataset, "where": list(args.where)},
        "ef_search": None if args.exact else database.ef_search_for(args.k, args.ef_search), "exact": args.exact,
        "neighbours": [{"rank": rank, "key": key, "source": source, "path": path, "label": label,
                        "dataset": dataset, "dataset_source": datasets.get(dataset), "distance": float(distance)}
                       for rank, (key, source, path, label, dataset, distance) in enumerate(neighbours, start=1)]}


def main():
    """Console-script entry point."""
    from beam_pipeline.common.launcher import console_main

    console_main(run)
