"""The flags of the input side: which columns of the list hold what, how shards are cut, how URL rows are fetched.

Imports neither Beam nor TensorFlow, so `--help` and flag errors answer at once.
"""

from __future__ import annotations

import argparse

from beam_pipeline.inputs import rows, urls


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
