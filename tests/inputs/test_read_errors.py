"""Why an image file could not be read: one reason code per OS error, the detail naming the errno and the path."""

import errno
import json
import os
import subprocess
import sys
import textwrap

import pytest

from beam_pipeline.inputs import rows as source
from tf_serving_input import failures

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def failure_of(path, index=0):
    """The errors.jsonl entry of a row whose file is `path`."""
    row = source.Row(index=index, line=index + 2, source=str(path), path=str(path), label="",
                     split="train", key=source.row_key(index, str(path)))
    with pytest.raises(failures.RowFailure) as caught:
        source.read_image_bytes(str(path))
    return source.failure_record(row, caught.value)


def test_the_new_codes_are_stable_and_described():
    assert (failures.PATH_TOO_LONG, failures.PERMISSION_DENIED, failures.IS_A_DIRECTORY, failures.SYMLINK_LOOP) == (
        "path_too_long", "permission_denied", "is_a_directory", "symlink_loop")
    assert {"path_too_long", "permission_denied", "is_a_directory", "symlink_loop", "file_not_found",
            "read_error"} <= set(failures.REASONS)
    read_error = failures.REASONS[failures.READ_ERROR]
    assert "permission" not in read_error and "director" not in read_error, read_error


def test_a_name_longer_than_the_os_allows_is_path_too_long(tmp_path):
    path = tmp_path / ("n" * 300)
    record = failure_of(path)
    assert record["reason"] == failures.PATH_TOO_LONG, record
    assert str(path) in record["detail"] and "ENAMETOOLONG" in record["detail"]


def test_a_path_longer_than_the_os_allows_is_path_too_long(tmp_path):
    path = tmp_path.joinpath(*["d" * 200] * 25, "a.jpg")  # Each name fits; the whole path is over PATH_MAX.
    record = failure_of(path)
    assert record["reason"] == failures.PATH_TOO_LONG, record
    assert str(path) in record["detail"] and "ENAMETOOLONG" in record["detail"]


def test_a_symlink_loop_is_symlink_loop(tmp_path):
    os.symlink(tmp_path / "b.jpg", tmp_path / "a.jpg")
    os.symlink(tmp_path / "a.jpg", tmp_path / "b.jpg")
    for index, name in enumerate(("a.jpg", "b.jpg")):
        record = failure_of(tmp_path / name, index)
        assert record["reason"] == failures.SYMLINK_LOOP, record
        assert str(tmp_path / name) in record["detail"] and "ELOOP" in record["detail"]


def test_a_directory_is_is_a_directory(tmp_path):
    (tmp_path / "photos.jpg").mkdir()
    record = failure_of(tmp_path / "photos.jpg")
    assert record["reason"] == failures.IS_A_DIRECTORY, record
    assert str(tmp_path / "photos.jpg") in record["detail"] and "EISDIR" in record["detail"]


def test_a_missing_file_is_file_not_found(tmp_path):
    record = failure_of(tmp_path / "missing.jpg")
    assert record["reason"] == failures.FILE_NOT_FOUND and record["detail"] == str(tmp_path / "missing.jpg")
    os.symlink(tmp_path / "gone.jpg", tmp_path / "dangling.jpg")
    record = failure_of(tmp_path / "dangling.jpg")
    assert record["reason"] == failures.FILE_NOT_FOUND and record["detail"] == str(tmp_path / "dangling.jpg")


def test_a_file_used_as_a_folder_is_file_not_found(tmp_path):
    (tmp_path / "a.jpg").write_bytes(b"x")
    record = failure_of(tmp_path / "a.jpg" / "b.jpg")  # ENOTDIR: no file can be there.
    assert record["reason"] == failures.FILE_NOT_FOUND, record
    assert str(tmp_path / "a.jpg" / "b.jpg") in record["detail"] and "ENOTDIR" in record["detail"]


# Run in a fresh interpreter that drops the capabilities that let root read any file (CAP_DAC_OVERRIDE,
# CAP_DAC_READ_SEARCH), so that a chmod 000 file refuses even root: a real EACCES from the kernel.
_WITHOUT_ROOTS_READ_RIGHTS = textwrap.dedent("""
    import ctypes, json, sys

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    libc = ctypes.CDLL(None, use_errno=True)
    header, data = Header(0x20080522, 0), (Data * 2)()  # _LINUX_CAPABILITY_VERSION_3
    if libc.capget(ctypes.byref(header), data) != 0:
        sys.exit(3)
    for bit in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
        data[0].effective &= ~(1 << bit)
        data[0].permitted &= ~(1 << bit)
    if libc.capset(ctypes.byref(header), data) != 0:
        sys.exit(3)
    from beam_pipeline.inputs.rows import read_image_bytes
    from tf_serving_input.failures import RowFailure
    try:
        read_image_bytes(sys.argv[1])
    except RowFailure as failure:
        print(json.dumps({"reason": failure.reason, "detail": failure.detail}))
    else:
        sys.exit(4)
""")


def test_an_unreadable_file_is_permission_denied(tmp_path):
    path = tmp_path / "secret.jpg"
    path.write_bytes(b"\xff\xd8\xff\xe0 not for you")
    path.chmod(0)
    try:
        if os.geteuid() != 0:
            record = failure_of(path)
        else:  # Root ignores permissions; without its DAC capabilities it does not.
            result = subprocess.run([sys.executable, "-c", _WITHOUT_ROOTS_READ_RIGHTS, str(path)], cwd=REPO,
                                    capture_output=True, text=True, timeout=120,
                                    env=dict(os.environ, PYTHONPATH=REPO))
            if result.returncode in (3, 4):
                pytest.skip("running as root, and root could not give up its right to read any file "
                            "(capset refused, or the read still succeeded)")
            assert result.returncode == 0, result.stderr[-3000:]
            record = json.loads(result.stdout.strip().splitlines()[-1])
    finally:
        path.chmod(0o600)
    assert record["reason"] == failures.PERMISSION_DENIED, record
    assert str(path) in record["detail"] and "EACCES" in record["detail"]


@pytest.mark.parametrize("number, reason", [
    (errno.EACCES, "permission_denied"), (errno.EPERM, "permission_denied"),
    (errno.ENAMETOOLONG, "path_too_long"), (errno.ELOOP, "symlink_loop"),
    (errno.EISDIR, "is_a_directory"), (errno.ENOENT, "file_not_found"), (errno.ENOTDIR, "file_not_found"),
    (errno.EIO, "read_error")])
@pytest.mark.parametrize("wrapped", [False, True])
def test_the_errno_is_found_through_beams_wrapping(monkeypatch, tmp_path, number, reason, wrapped):
    from apache_beam.io.filesystem import BeamIOError
    from apache_beam.io.filesystems import FileSystems

    path = str(tmp_path / "x.jpg")
    error = OSError(number, os.strerror(number))

    def refuse(*args, **kwargs):
        raise BeamIOError("Open failed", {path: error}) if wrapped else error

    monkeypatch.setattr(FileSystems, "open", refuse)
    with pytest.raises(failures.RowFailure) as caught:
        source.read_image_bytes(path)
    assert caught.value.reason == reason
    assert path in caught.value.detail
    if number != errno.ENOENT:
        assert errno.errorcode[number] in caught.value.detail, caught.value.detail


@pytest.mark.parametrize("exists, reason, detail", [
    (False, failures.FILE_NOT_FOUND, "gs://bucket/a.jpg"),
    (True, failures.READ_ERROR, "RuntimeError: 403 Forbidden")])
def test_remote_paths_keep_their_mapping(monkeypatch, exists, reason, detail):
    from apache_beam.io.filesystems import FileSystems

    def refuse(*args, **kwargs):
        raise RuntimeError("403 Forbidden\nmore")

    monkeypatch.setattr(FileSystems, "open", refuse)
    monkeypatch.setattr(FileSystems, "exists", lambda path: exists)
    with pytest.raises(failures.RowFailure) as caught:
        source.read_image_bytes("gs://bucket/a.jpg")
    assert (caught.value.reason, caught.value.detail) == (reason, detail)


def test_a_local_file_is_read_whole_up_to_max_bytes_and_refused_past_it(tmp_path):
    path = tmp_path / "photo.jpg"
    path.write_bytes(b"\xff\xd8\xff" + bytes(range(256)) * 40)
    size = path.stat().st_size
    assert source.read_image_bytes(str(path), max_bytes=size) == path.read_bytes()
    with pytest.raises(failures.RowFailure) as caught:
        source.read_image_bytes(str(path), max_bytes=size - 1)
    assert caught.value.reason == failures.TOO_LARGE_FILE
    path.write_bytes(b"")
    with pytest.raises(failures.RowFailure) as caught:
        source.read_image_bytes(str(path))
    assert caught.value.reason == failures.EMPTY_FILE


def test_a_fifo_is_refused_without_being_opened(tmp_path):
    fifo = tmp_path / "pipe.jpg"
    os.mkfifo(fifo)  # Opening it to read would block until a writer came: the row must fail at once.
    with pytest.raises(failures.RowFailure) as caught:
        source.read_image_bytes(str(fifo))
    assert caught.value.reason == failures.READ_ERROR and "a FIFO, not a regular file" in caught.value.detail


@pytest.mark.slow  # Reads 2.2 GB (of a sparse file: no disk) into memory.
def test_a_file_one_read_call_cannot_return_whole_is_still_read_to_its_limit(tmp_path):
    # Linux returns at most 2,147,479,552 bytes from one read(2): a single unbuffered read of a bigger file
    # took its first 2 GiB for the whole file (the hostile trial of issue 39's read path).
    path = tmp_path / "padded.jpg"
    with open(path, "wb") as f:
        f.write(b"\xff\xd8\xff")
        f.truncate(2_500_000_000)
    with pytest.raises(failures.RowFailure) as caught:
        source.read_image_bytes(str(path), max_bytes=2_200_000_000)
    assert caught.value.reason == failures.TOO_LARGE_FILE


def hint_of(tmp_path, cell):
    """The file_not_found detail of a CSV row whose path cell is `cell` (resolved as the job resolves it)."""
    csv_path = tmp_path / "in.csv"
    csv_path.write_text('path\n"' + cell.replace('"', '""') + '"\n', encoding="utf-8")
    row = next(source.iter_rows(str(csv_path)))
    with pytest.raises(failures.RowFailure) as caught:
        source.read_image_bytes(row.path)
    assert caught.value.reason == failures.FILE_NOT_FOUND, caught.value
    return caught.value.detail


@pytest.mark.parametrize("on_disk, cell, why", [
    ("a.jpg", " a.jpg", "surrounding spaces"),
    ("a.jpg", "a.jpg\t ", "surrounding spaces"),
    ("photos/a.jpg", "photos /a.jpg", "surrounding spaces"),
    ("caf\u00e9.jpg", "cafe\u0301.jpg", "NFC"),  # An NFD cell, an NFC-named file.
    ("cafe\u0301.jpg", "caf\u00e9.jpg", "NFD"),  # And the other way round.
    ("\u00e9t\u00e9/cafe\u0301.jpg", " e\u0301te\u0301/caf\u00e9.jpg ", "NFC"),  # Each name as it is on disk.
])
def test_a_path_that_almost_names_a_file_gets_a_hint(tmp_path, on_disk, cell, why):
    target = tmp_path / on_disk
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(b"x")
    detail = hint_of(tmp_path, cell)
    assert f"did you mean '{target}'" in detail and why in detail, detail
    assert detail.startswith(os.path.join(str(tmp_path), cell)), detail  # The path read comes first, as before.


def test_an_absolute_path_after_spaces_gets_a_hint(tmp_path):
    (tmp_path / "a.jpg").write_bytes(b"x")
    (tmp_path / "csv").mkdir()
    detail = hint_of(tmp_path / "csv", f"  {tmp_path / 'a.jpg'}")  # Resolved as relative: csv/  /tmp/.../a.jpg.
    assert f"did you mean '{tmp_path / 'a.jpg'}'" in detail, detail


def test_a_hint_is_made_safe_to_show_and_absent_without_a_near_match(tmp_path):
    (tmp_path / "a\x1b[2J\u202e.jpg").write_bytes(b"x")
    detail = hint_of(tmp_path, " a\x1b[2J\u202e.jpg")
    assert "did you mean" in detail and "\x1b" not in detail.split("did you mean")[1], detail
    assert "\\x1b[2J\\u202e.jpg'" in detail
    assert hint_of(tmp_path, "b.jpg") == str(tmp_path / "b.jpg")  # No near match: the detail is the path alone.
