"""Folders through `beam_pipeline.common.files` on a local disk (gs:// has them in end_to_end/test_gcs.py)."""

from beam_pipeline.common.files import delete_tree, exists


def test_a_folder_and_a_file_exist_and_are_deleted_and_what_is_absent_is_no_error(tmp_path):
    (tmp_path / "run" / "data").mkdir(parents=True)
    (tmp_path / "run" / "data" / "shard").write_bytes(b"x")
    (tmp_path / "manifest.json").write_text("{}")
    folder, file, absent = str(tmp_path / "run"), str(tmp_path / "manifest.json"), str(tmp_path / ".tmp")
    assert exists(folder) and exists(file) and not exists(absent)
    # A run given --temp_location has no .tmp/ to delete, nor a first quality run a pairs/.
    delete_tree([folder, file, absent])
    assert not exists(folder) and not exists(file)
