"""`beam-image-pipeline ui` (also `python -m beam_pipeline.ui`): a local web app over a run.

    python -m beam_pipeline.ui --input_dir JOB_OUTPUT [--predictions_dir PREDICT_OUTPUT --model_dir EXPORT
        --database embedded|URL --database_dir DIR --table NAME] [--quality_dir QUALITY_OUT]
        [--host 127.0.0.1] [--port 8080] [--open]

Each part lights up when its inputs are given: the job output alone gives the overview, gallery, image
pages and failures; a predictions table adds neighbours (and `--model_dir` search by upload); a quality
folder adds the quality pages. Everything is read once at start-up (the record index, the model, a
pool of database connections); requests only look things up.
"""

from __future__ import annotations

import math
import os
import sys

from beam_pipeline.common import flags, terminal

PROG = "beam-image-pipeline ui"
LOOPBACK = "127.0.0.1"
DEFAULT_MAX_FILE_BYTES = 32 * 1024 * 1024  # An upload is read whole into memory: less than the job's 256 MiB.


def build_parser(prog: str = PROG):
    """The UI's flags."""
    parser = flags.new_parser(
        prog=prog,
        description="Serve a web UI over a finished run: overview, gallery, image pages, failures; neighbours and "
                    "search by upload with the predictions; quality pages with a quality folder.")
    parser.add_argument("--input_dir", required=True, help="The preprocessing job's --output_dir.")
    parser.add_argument("--predictions_dir", help="The predict job's --output_dir (top-k per image, its table).")
    parser.add_argument("--model_dir", help="The serving export the predictions came from (search by upload).")
    parser.add_argument("--image_step", action="append", default=[], metavar="SPEC",
                        help="FILE.py:FUNCTION (or package.module:FUNCTION): one of the run's --image_step steps, "
                             "given once per step, in order, when --model_dir takes images after them (a run with a "
                             "Python step): uploads go through them. Loaded only when its SHA-256 is the one the "
                             "export records; never loaded from what a run or an export names (docs/steps.md).")
    parser.add_argument("--database", default=None,
                        help="'embedded' or a postgresql:// URL (default: embedded when --predictions_dir or "
                             "--database_dir is given, else no database).")
    parser.add_argument("--database_dir", default=None, help="The embedded server's data folder.")
    parser.add_argument("--table", default=None,
                        help="The predictions table (default: the predict manifest's, else the only one).")
    parser.add_argument("--quality_dir", help="The quality job's output folder (duplicates, leaks, flags).")
    parser.add_argument("--host", default=LOOPBACK,
                        help="Address to listen on (loopback by default; 0.0.0.0: every network, unauthenticated).")
    parser.add_argument("--port", type=int, default=8080, help="TCP port (0: any free one).")
    parser.add_argument("--open", action="store_true", help="Open the UI in a browser once it listens.")
    parser.add_argument("--max_file_bytes", type=int, default=DEFAULT_MAX_FILE_BYTES,
                        help="Refuse larger uploads (413, too_large_file).")
    parser.add_argument("--upload_timeout", type=float, default=60.0,
                        help="Seconds an upload's body may take to arrive (longer for large ones: at least 256 KiB/s); "
                             "a stalled upload is answered 408 and its connection closed.")
    parser.add_argument("--upload_read_timeout", type=float, default=10.0,
                        help="Seconds an upload may send nothing before it is answered 408 and its connection "
                             "closed (a trickle that keeps sending is cut off by --upload_timeout).")
    flags.add_verbose_flag(parser)
    return parser


def _refusal(args) -> str | None:
    """Why the flags cannot start the UI (one line), or None."""
    from beam_pipeline import database

    for flag in ("input_dir", "predictions_dir", "model_dir", "quality_dir"):
        value = getattr(args, flag)
        if value is not None and not os.path.isdir(value):
            return f"--{flag} {value} is not a folder"
    if not 0 <= args.port <= 65535:
        return f"--port must be from 0 to 65535, not {args.port}"
    for flag in ("upload_timeout", "upload_read_timeout"):
        if not 0 < getattr(args, flag) < math.inf:
            return f"--{flag} must be a number of seconds more than 0, not {getattr(args, flag)}"
    if args.max_file_bytes < 1:
        return f"--max_file_bytes must be at least 1, not {args.max_file_bytes}"
    if args.database is not None:
        problem = database.database_flag_problem(args.database, allow_none=True)
        if problem:
            return problem
    if args.table is not None:
        try:
            database.check_table_name(args.table)
        except database.TableNameError as error:
            return f"--table: {error}"
    if args.image_step and not args.model_dir:
        return "--image_step applies the run's steps to uploads, which --model_dir embeds: give --model_dir"
    if args.model_dir and not (args.predictions_dir or args.database or args.database_dir):
        return "--model_dir searches the predictions table: give --predictions_dir and --database too"
    return None


def database_choice(args) -> str | None:
    """The --database value to use, or None for no database parts."""
    if args.database is not None:
        return None if args.database == "none" else args.database
    return "embedded" if (args.predictions_dir or args.database_dir) else None


def run(argv: list[str] | None = None, prog: str = PROG) -> int:
    """Starts the UI and serves until interrupted; returns the exit code (1 cannot start, 2 bad flags or run
    folders that do not fit together)."""
    args = flags.parse_flags(build_parser(prog), sys.argv[1:] if argv is None else argv)
    refusal = _refusal(args)
    if refusal:
        print(f"error: {refusal}", file=sys.stderr)
        return 2
    from beam_pipeline import database
    from beam_pipeline.common.query_embedding import ExportError
    from beam_pipeline.common.redact import redact
    from beam_pipeline.ui.startup import RunRefused, StartupError, load_state

    if args.host != LOOPBACK and args.host not in ("localhost", "::1"):
        print(f"warning: --host {args.host} serves this UI, unauthenticated, to every machine that can reach "
              "this address: every image of the run can be seen and searched", file=sys.stderr)
    try:
        state, resources = load_state(args, database_choice(args))
    except RunRefused as error:  # The folders given do not fit together: bad input, like a bad flag.
        print(redact(f"error: {error}"), file=sys.stderr)
        return 2
    except (StartupError, database.DatabaseError, ExportError, FileNotFoundError, OSError, ValueError) as error:
        print(redact(f"error: {error}"), file=sys.stderr)
        return 1
    try:
        return serve(state, args.host, args.port, args.open)
    finally:
        resources.close()


def serve(state, host: str, port: int, open_browser: bool) -> int:
    """Serves the app with uvicorn until interrupted; prints the URL once it listens."""
    import socket

    import uvicorn

    from beam_pipeline.ui.app import create_app
    from beam_pipeline.ui.guard import allowed_hosts

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named: asyncio sets TCP_NODELAY only on sockets whose proto says TCP (proto 0 does not), and
    # without it every response after the first on a kept-alive connection waits 40 ms for a delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as error:
        print(f"error: cannot listen on {host}:{port}: {error.strerror}", file=sys.stderr)
        return 1
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{'127.0.0.1' if host in ('0.0.0.0', '') else shown}:{bound}/"
    # The Host check needs the bound port (--port 0 picks one).
    config = uvicorn.Config(create_app(state, allowed_hosts(host, bound)), log_level="warning", access_log=False,
                            limit_concurrency=200, timeout_keep_alive=5)
    server = uvicorn.Server(config)
    terminal.result(f"UI of {state.job.layout.root} on {url} (Ctrl-C stops it)")
    if open_browser:
        import threading

        threading.Timer(1.0, open_in_browser, (url,)).start()
    server.run(sockets=[sock])
    return 0


def open_in_browser(url: str) -> None:
    """Opens `url` in this machine's browser; says so on stderr when there is none (a server, a container)."""
    import webbrowser

    try:
        opened = webbrowser.open(url)
    except webbrowser.Error:
        opened = False
    if not opened:
        terminal.notice(f"--open: no browser found on this machine: open {url} in one that can reach it")


def main() -> None:
    """Console-script entry point."""
    from beam_pipeline.common.launcher import console_main

    console_main(run)
