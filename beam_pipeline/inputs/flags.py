"""The flags of the input side: which columns of the list hold what, how shards are cut, how URL rows are fetched.

Imports neither Beam nor TensorFlow, so `--help` and flag errors answer at once.
"""

from __future__ import annotations

import argparse

from beam_pipeline.inputs import rows, tables, urls
from beam_pipeline.inputs.cells import DEFAULT_LIST_SEPARATOR
from tf_serving_input.columns import COLUMN_TYPES, LABELS, TEXT, Column, ColumnError, FeatureSpec, check_columns


def add_csv_flags(parser: argparse.ArgumentParser, scope: str = "") -> None:
    """The flags saying how a CSV of images is read and sharded; `scope` prefixes their help ('With --input_csv: ')."""
    parser.add_argument("--num_shards", type=int, default=0,
                        help=f"{scope}Shards per split; 0 picks one per ~{rows.ROWS_PER_SHARD} rows (at least "
                             f"{rows.MIN_AUTO_SHARDS}, at most one per row).")
    parser.add_argument("--path_column", default=rows.CsvColumns.path,
                        help=f"{scope}CSV column holding the image path or URI.")
    parser.add_argument("--label_column", default=rows.CsvColumns.label,
                        help=f"{scope}CSV column holding the label (optional: unlabeled data is valid).")
    parser.add_argument("--split_column", default=rows.CsvColumns.split,
                        help=f"{scope}CSV column naming each row's split (train, validation, ...); without it "
                             "every row is 'train'.")
    parser.add_argument("--max_file_bytes", type=int, default=rows.DEFAULT_MAX_FILE_BYTES,
                        help=f"{scope}Refuse files larger than this many bytes without reading them whole.")


def add_input_flags(parser: argparse.ArgumentParser) -> None:
    """The flags naming the list of images: --input (any format) or --input_csv (a CSV, as before), --input_format."""
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--input", metavar="PATH",
                        help="The list of images: a CSV, TSV, JSON Lines or Parquet file (.gz for the text ones), "
                             "or a glob or folder of them, read in path order; local or any Beam filesystem URI "
                             "(gs://, s3://). The format comes from each name's extension (a single file of "
                             "another name is read as CSV), or from --input_format. Relative image paths resolve "
                             "against the list file's folder (docs/columns.md).")
    source.add_argument("--input_csv", metavar="CSV",
                        help="A CSV with a header row and one image per row (read as CSV whatever its name); local "
                             "path or any Beam filesystem URI (gs://, s3://). Relative image paths resolve against "
                             "the CSV's folder.")
    parser.add_argument("--input_format", choices=tables.FORMATS, default="",
                        help="The format of every file of --input, whatever their names (default: by extension).")


def input_list(parser: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[str, str]:
    """(the list's path, glob or folder; its format or '') the `add_input_flags` flags give."""
    if args.input_csv is not None:
        if args.input_format not in ("", tables.CSV):
            parser.error(f"--input_csv reads a CSV; for a {args.input_format} list give --input")
        return args.input_csv, tables.CSV
    return args.input, args.input_format


def add_url_flags(parser: argparse.ArgumentParser) -> None:
    """The flags of URL rows (a path cell that is an http:// or https:// URL): concurrency, timeouts, retries."""
    default = urls.FetchConfig()
    group = parser.add_argument_group(
        "URL rows", "A path cell may be an http:// or https:// URL: the job fetches it, checking each address, "
                    "retrying transient failures and honouring X-Robots-Tag opt-outs (noai, noimageai, noindex, "
                    "noimageindex). Proxies come from http_proxy, https_proxy and no_proxy only.")
    group.add_argument("--url_concurrency", type=int, default=default.concurrency,
                       help="Requests in flight per worker process.")
    group.add_argument("--url_per_host", type=int, default=default.per_host,
                       help="Requests in flight per worker to one host, so one slow host cannot take every slot.")
    group.add_argument("--url_connect_timeout", type=float, default=default.connect_timeout,
                       help="Seconds to connect (TLS included) before the attempt fails as a timeout.")
    group.add_argument("--url_read_timeout", type=float, default=default.read_timeout,
                       help="Seconds to wait for the next bytes of an answer.")
    group.add_argument("--url_timeout", type=float, default=default.total_timeout,
                       help="Seconds for a whole URL: every redirect, retry and wait included; a body that "
                            "trickles is cut off here.")
    group.add_argument("--url_max_attempts", type=int, default=default.max_attempts,
                       help="Tries of a URL that fails transiently (connection, timeout, 429, 5xx), counted over "
                            "all its redirects; other 4xx answers are never retried.")
    group.add_argument("--url_max_redirects", type=int, default=default.max_redirects,
                       help="Redirects followed before the row fails as too_many_redirects.")
    group.add_argument("--url_retry_after_max", type=float, default=default.retry_after_max,
                       help="The longest Retry-After (seconds) waited for; a longer one fails the row at once.")
    group.add_argument("--url_allow_private", action="store_true",
                       help="Fetch URLs whose host resolves to a loopback, private or link-local address. Off, "
                            "such rows fail as bad_url, so a CSV from someone else cannot probe your network.")
    group.add_argument("--user_agent_extra", default=None,
                       help="Text added to the User-Agent header (e.g. a contact address for site owners).")


def url_config(parser: argparse.ArgumentParser, args: argparse.Namespace) -> urls.FetchConfig:
    """The FetchConfig the `add_url_flags` flags give; exits with usage when one is out of range."""
    for name in ("url_concurrency", "url_per_host", "url_max_attempts"):
        if not 1 <= getattr(args, name) <= 1024:
            parser.error(f"--{name} must be between 1 and 1024")
    for name in ("url_connect_timeout", "url_read_timeout", "url_timeout"):
        if not 0 < getattr(args, name) <= 86400:
            parser.error(f"--{name} must be more than 0 and at most 86400 seconds")
    if not 0 <= args.url_max_redirects <= 100:
        parser.error("--url_max_redirects must be between 0 and 100")
    if not 0 <= args.url_retry_after_max <= 86400:
        parser.error("--url_retry_after_max must be between 0 and 86400 seconds")
    extra = args.user_agent_extra or ""
    if any(not char.isprintable() or not char.isascii() for char in extra):
        parser.error("--user_agent_extra must be printable ASCII (it goes into an HTTP header)")
    return urls.FetchConfig(
        concurrency=args.url_concurrency, per_host=min(args.url_per_host, args.url_concurrency),
        connect_timeout=args.url_connect_timeout, read_timeout=args.url_read_timeout,
        total_timeout=args.url_timeout, max_attempts=args.url_max_attempts, max_redirects=args.url_max_redirects,
        retry_after_max=args.url_retry_after_max, allow_private=args.url_allow_private,
        user_agent_extra=extra)


def csv_columns(args: argparse.Namespace) -> rows.CsvColumns:
    """The CsvColumns the `add_csv_flags` flags name."""
    return rows.CsvColumns(path=args.path_column, label=args.label_column, split=args.split_column)


def add_column_flags(parser: argparse.ArgumentParser) -> None:
    """The flags naming the list's columns kept in each record (`--column`) and how a list cell is read."""
    group = parser.add_argument_group(
        "Kept columns", "Columns of the list kept in each record beside the image, typed (docs/columns.md): "
                        f"{', '.join(COLUMN_TYPES)}. A missing value is an absent feature; a cell that is not of "
                        "its column's type fails its row as bad_value.")
    group.add_argument("--column", action="append", default=[], metavar="NAME[:TYPE]",
                       help="Keep this column in each record, as TYPE (repeatable). A Parquet or JSON Lines list "
                            "gives the type when it is left out (its schema; a JSON column's values); a CSV or TSV "
                            "column needs it. Naming the label column as 'labels' makes a multi-label list "
                            "(several labels per image).")
    group.add_argument("--list_separator", default=DEFAULT_LIST_SEPARATOR,
                       help="What separates the items of a labels, floats or boxes cell in a CSV or TSV.")
    group.add_argument("--box_class_column", default=None, metavar="NAME",
                       help="A labels column (also given with --column) holding each box's class, one per box, in "
                            "the boxes column's order: written under image/object/class/text.")


def split_column_flag(value: str) -> tuple[str, str | None]:
    """'NAME:TYPE' -> (NAME, TYPE); 'NAME' (or a NAME whose last ':' part is no type) -> (NAME, None)."""
    name, colon, kind = value.rpartition(":")
    if colon and kind.strip().lower() in COLUMN_TYPES:
        return name, kind.strip().lower()
    return value, None


# One --column flag: (name, type or None when the list's schema gives it, whether it holds the boxes' classes).
ColumnRequest = tuple[str, "str | None", bool]


def column_requests(args: argparse.Namespace) -> tuple[ColumnRequest, ...]:
    """The `--column` flags in order, each (name, type or None, whether it is the --box_class_column)."""
    return tuple((*split_column_flag(value), split_column_flag(value)[0] == args.box_class_column)
                 for value in args.column)


def build_features(requests: tuple[ColumnRequest, ...], label_column: str) -> FeatureSpec:
    """The FeatureSpec of fully typed `requests`; ColumnError (one line) when they cannot be used together."""
    kept: list[Column] = []
    multi_label = False
    for name, kind, box_classes in requests:
        assert kind is not None, "typed_features gives every column its type first"
        if name == label_column:
            if kind != LABELS:
                raise ColumnError(f"--column '{name}:{kind}': the label column is kept as the label; only ':labels' "
                                  "(a multi-label list) may be given for it")
            multi_label = True
            continue
        kept.append(Column(name, kind, box_classes=box_classes))
    return FeatureSpec(columns=check_columns(kept), multi_label=multi_label)


def typed_features(input_spec: str, input_format: str, requests: tuple[ColumnRequest, ...],
                   label_column: str) -> FeatureSpec:
    """The FeatureSpec of `requests`, the columns given without a type typed by the list's schema (Parquet) or
    values (JSON Lines): `tables.schema_types`. Raises ListError or ColumnError (both one line) when it cannot."""
    untyped = [name for name, kind, _ in requests if kind is None]
    types = tables.schema_types(tables.list_files(input_spec, input_format), untyped) if untyped else {}
    missing = [name for name in untyped if name not in types]
    if missing:
        raise ColumnError(f"--column '{missing[0]}' is not a column of the list {input_spec}")
    return build_features(tuple((name, kind or types[name], box) for name, kind, box in requests), label_column)


# The name the reader's dict gives the run's label (`make_dataset(columns=...)`): no kept column may take it.
READER_LABEL = "label"


def reserved_column(name: str, args: argparse.Namespace, label_column: str) -> str | None:
    """Why `name` cannot be a kept column because the job reads it as something else, or None: the list's path
    or split column (each row's image and split), or 'label' beside another label column (the reader's name for
    the run's label). The label column itself may be given, as ':labels' only (`build_features`)."""
    for flag, role in (("path_column", "path"), ("split_column", "split")):
        if name == getattr(args, flag, None):
            return (f"{name!r} is the list's {role} column (--{flag}), read as each row's {role}; it cannot "
                    "also be a kept column")
    if name == READER_LABEL and name != label_column:
        return (f"{name!r} is the reader's name for the run's label (make_dataset's columns dict); rename the "
                "list's column")
    return None


def feature_spec(parser: argparse.ArgumentParser, args: argparse.Namespace, label_column: str,
                 text_list: bool = False) -> FeatureSpec | None:
    """The FeatureSpec the `add_column_flags` flags give, or None when a column has no type yet (the list's
    schema gives it: `typed_features`); exits with usage (2) when they cannot be used. `text_list`: the list
    is known to be CSV (--input_csv), whose columns all need a type."""
    if len(args.list_separator) != 1 or args.list_separator.isspace() or not args.list_separator.isprintable():
        parser.error("--list_separator must be one printable character that is not a space")
    requests = column_requests(args)
    for value, (name, _, _) in zip(args.column, requests):
        reserved = reserved_column(name, args, label_column)
        if reserved:
            parser.error(f"--column {value!r}: {reserved}")
    for value, request in zip(args.column, requests):
        if request[1] is None and text_list:
            typo = value.rpartition(":")[2] if ":" in value else ""
            parser.error(f"--column {value!r} needs a type: NAME:TYPE with TYPE one of {', '.join(COLUMN_TYPES)}"
                         + (f" ({typo!r} is not one)" if typo else ""))
    # Checked now with a stand-in type for the untyped ones (a label column's or box classes' can only be
    # labels), so that a name or combination that can never work is refused before the list is read.
    stand_in = tuple((name, kind or (LABELS if name == label_column or box else TEXT), box)
                     for name, kind, box in requests)
    try:
        spec = build_features(stand_in, label_column)
    except ColumnError as error:
        parser.error(str(error) if str(error).startswith("--column") else f"--column: {error}")
    if args.box_class_column is not None and not any(column.box_classes for column in spec.columns):
        parser.error(f"--box_class_column {args.box_class_column!r} must also be given as --column NAME:labels")
    return None if any(kind is None for _, kind, _ in requests) else spec
