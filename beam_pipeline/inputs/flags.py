"""The flags of the input side: which columns of the list hold what, how shards are cut, how URL rows are fetched.

Imports neither Beam nor TensorFlow, so `--help` and flag errors answer at once.
"""

from __future__ import annotations

import argparse

from beam_pipeline.inputs import rows, urls
from beam_pipeline.inputs.cells import DEFAULT_LIST_SEPARATOR
from tf_serving_input.columns import COLUMN_TYPES, LABELS, Column, ColumnError, FeatureSpec, check_columns


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
                       help="Keep this column in each record, as TYPE (repeatable). Naming the label column as "
                            "'labels' makes a multi-label list (several labels per image).")
    group.add_argument("--list_separator", default=DEFAULT_LIST_SEPARATOR,
                       help="What separates the items of a labels, floats or boxes cell in a CSV.")
    group.add_argument("--box_class_column", default=None, metavar="NAME",
                       help="A labels column (also given with --column) holding each box's class, one per box, in "
                            "the boxes column's order: written under image/object/class/text.")


def split_column_flag(value: str) -> tuple[str, str | None]:
    """'NAME:TYPE' -> (NAME, TYPE); 'NAME' (or a NAME whose last ':' part is no type) -> (NAME, None)."""
    name, colon, kind = value.rpartition(":")
    if colon and kind.strip().lower() in COLUMN_TYPES:
        return name, kind.strip().lower()
    return value, None


def feature_spec(parser: argparse.ArgumentParser, args: argparse.Namespace, label_column: str) -> FeatureSpec:
    """The FeatureSpec the `add_column_flags` flags give; exits with usage (2) when they cannot be used."""
    if len(args.list_separator) != 1 or args.list_separator.isspace() or not args.list_separator.isprintable():
        parser.error("--list_separator must be one printable character that is not a space")
    kept: list[Column] = []
    multi_label = False
    for value in args.column:
        name, kind = split_column_flag(value)
        if kind is None:
            parser.error(f"--column {value!r} needs a type: NAME:TYPE with TYPE one of {', '.join(COLUMN_TYPES)}")
        if name == label_column:
            if kind != LABELS:
                parser.error(f"--column {value!r}: the label column is kept as the label; only ':labels' (a "
                             "multi-label list) may be given for it")
            multi_label = True
            continue
        kept.append(Column(name, kind, box_classes=name == args.box_class_column))
    if args.box_class_column is not None and not any(column.box_classes for column in kept):
        parser.error(f"--box_class_column {args.box_class_column!r} must also be given as --column NAME:labels")
    try:
        return FeatureSpec(columns=check_columns(kept), multi_label=multi_label)
    except ColumnError as error:
        parser.error(f"--column: {error}")
