"""An output folder before a run: resume an identical earlier run, refuse another one, or overwrite.

Shared by the jobs: each passes its layout (tf_serving_input.layout) and the
fingerprint of what it is about to produce.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from apache_beam.io.filesystems import FileSystems

from beam_pipeline.common.files import delete_tree, exists, read_json, write_json

if TYPE_CHECKING:
    from tf_serving_input.layout import RunFolder


class OutputDirError(RuntimeError):
    """The output folder cannot be used as asked."""


# How many of the settings that differ a refusal names.
MAX_NAMED = 4


def differences(earlier: Any, now: Any, prefix: str = "") -> list[str]:
    """The dotted names of the settings that differ between two fingerprints (never their values: a value may be
    long, or a URL): what a refusal says changed, such as `config.image_steps` for a changed step."""
    if not isinstance(earlier, dict) or not isinstance(now, dict):
        return [prefix.rstrip(".")] if earlier != now and prefix else []
    found = []
    for name in sorted(set(earlier) | set(now), key=str):
        if earlier.get(name) != now.get(name):
            found += differences(earlier.get(name), now.get(name), f"{prefix}{name}.") if isinstance(
                earlier.get(name), dict) and isinstance(now.get(name), dict) else [f"{prefix}{name}"]
    return found


def leftover_attempts(layout: RunFolder) -> list[str]:
    """The temporary files of attempts that never published their shard: a killed run's, or, in a run that
    finished, those of attempts a runner abandoned and re-ran elsewhere (Spark re-runs a lost worker's tasks)."""
    return [m.path for result in FileSystems.match(layout.temp_files_globs()) for m in result.metadata_list]


def prepare(layout: RunFolder, fingerprint: dict[str, Any], overwrite: bool) -> int:
    """Makes the folder ready; returns how many finished shards an earlier identical run left.

    An earlier run with the same `fingerprint` (its run file) is resumed: its
    finished shards stay (each is verified against its checksum before reuse),
    stale temporary files and the end-of-run outputs go. Output of a different
    run is refused, untouched, unless `overwrite`.
    """
    existing = [name for name in layout.entries() if exists(layout.path(name))]  # A folder on gs:// too.
    resumable = bool(existing) and not overwrite
    if resumable and (earlier := read_json(layout.run_file)) != fingerprint:
        changed = differences(earlier, fingerprint)
        what = f" (it differs in {', '.join(changed[:MAX_NAMED])}{', ...' if len(changed) > MAX_NAMED else ''})" \
            if changed else ""
        raise OutputDirError(
            f"{layout.root} already holds output of a different input or configuration{what} "
            f"({', '.join(existing)}); pass --overwrite to replace it, or choose another --output_dir")
    stale = [layout.path(name) for name in existing if not (resumable and name in layout.kept_on_resume())]
    if resumable:  # Files a killed run was still writing.
        stale += leftover_attempts(layout)
    if stale:
        delete_tree(stale)
    # The run file first: a run killed after it is resumed by the same command, while folders made
    # before it (a kill in between) read as another run's output and were refused.
    write_json(layout.run_file, fingerprint)
    for folder in (layout.data_dir, layout.status_dir):
        try:
            FileSystems.mkdirs(folder)
        except Exception:  # noqa: BLE001 - object stores have no folders; an existing one is fine too.
            pass
    if not resumable:
        return 0
    return len(FileSystems.match([layout.status_files_glob()])[0].metadata_list)
