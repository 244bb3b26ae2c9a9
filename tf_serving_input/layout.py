"""The output folders' contract: every path, file name and glob, in one place.

    layout = OutputLayout("out/")          # what `python -m beam_pipeline` writes
    layout.shard_file("train-00003-of-00016")   -> 'out/data/train-00003-of-00016.tfrecord'
    layout.load_manifest()

The job, the reader, the serving export, inspect, the scripts and the predict
job (`PredictionLayout`) all build their paths here, joined one way (`join`)
that suits local folders and URIs (gs://, s3://) alike, for Beam's
FileSystems and TensorFlow's gfile. Pure Python: importing it loads neither
TensorFlow nor Beam.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from tf_serving_input.columns import FEATURES_FILE

# Version of the layout and record contract. A run refuses to resume output written under
# another version (run.json records it): its shards would not match the new ones.
LAYOUT_VERSION = 2
TEMP_SUFFIX = ".incomplete"


def join(base: str, *parts: str) -> str:
    """`base/part/...` with '/' separators: the one path join for local folders and URIs."""
    if base.endswith("://") or base == "/":  # A bucket-less scheme or the root: keep its slashes.
        return base + "/".join(parts)
    return "/".join([base.rstrip("/"), *parts])


def shard_name(split: str, index: int, num_shards: int) -> str:
    """File stem of a shard, e.g. 'train-00003-of-00016'."""
    return f"{split}-{index:05d}-of-{num_shards:05d}"


def shard_stem(file: str) -> str:
    """The stem of a shard from its file's path as a manifest lists it: 'data/train-00003-of-00016.tfrecord' ->
    'train-00003-of-00016' (the inverse of `RunFolder.relative_shard_file`)."""
    return file.rsplit("/", 1)[-1].rsplit(".", 1)[0]


def shard_glob(split: str = "*") -> str:
    """A glob matching the stems of every shard of `split` (all splits by default)."""
    return f"{split}-*-of-*"


def temp_path(path: str, attempt: str) -> str:
    """Where attempt `attempt` (a unique id) writes `path` before publishing it under its final name."""
    return f"{path}.{attempt}{TEMP_SUFFIX}"


def is_local(path: str) -> bool:
    """Whether `path` is a local path (not a URI such as gs://...)."""
    return "://" not in path or path.startswith("file://")


def read_text(path: str) -> str:
    """The text of a file: locally with Python's open, elsewhere with TensorFlow's gfile."""
    if is_local(path):
        with open(path.removeprefix("file://"), encoding="utf-8") as f:
            return f.read()
    import tensorflow as tf  # Only for URIs: reading a local manifest stays fast.

    with tf.io.gfile.GFile(path, "r") as f:
        return f.read()


def read_bytes(path: str) -> bytes:
    """The bytes of a file (to check a digest): locally with Python's open, elsewhere with TensorFlow's gfile."""
    if is_local(path):
        with open(path.removeprefix("file://"), "rb") as f:
            return f.read()
    import tensorflow as tf

    with tf.io.gfile.GFile(path, "rb") as f:
        data: bytes = f.read()
        return data


def exists(path: str) -> bool:
    """Whether a file is there: locally with os.path, elsewhere with TensorFlow's gfile."""
    if is_local(path):
        import os

        return os.path.exists(path.removeprefix("file://"))
    import tensorflow as tf

    return tf.io.gfile.exists(path)


class RunFolder:
    """What every run's output folder holds: shard status files, the manifest, errors, run record, lock, logs."""

    STATUS_DIR = "shards"
    MANIFEST_FILE = "manifest.json"
    ERRORS_FILE = "errors.jsonl"
    RUN_FILE = "run.json"
    LOCK_FILE = ".lock"
    LOG_DIR = "logs"
    # Set by each kind of folder (typed as the str every one of them sets: RunFolder itself is never used).
    DATA_DIR: ClassVar[str] = None  # type: ignore[assignment]
    SHARD_SUFFIX: ClassVar[str] = None  # type: ignore[assignment]

    def __init__(self, root: str) -> None:
        self.root = root

    def path(self, *parts: str) -> str:
        """A path inside the folder."""
        return join(self.root, *parts)

    @property
    def data_dir(self) -> str:
        """The folder of the data files (shards)."""
        return self.path(self.DATA_DIR)

    @property
    def status_dir(self) -> str:
        """The folder of the shards' status files."""
        return self.path(self.STATUS_DIR)

    @property
    def manifest_file(self) -> str:
        """The manifest a finished run writes."""
        return self.path(self.MANIFEST_FILE)

    @property
    def errors_file(self) -> str:
        """The failed rows, one JSON object a line."""
        return self.path(self.ERRORS_FILE)

    @property
    def run_file(self) -> str:
        """The run's fingerprint (its input and configuration): a run resumes only output with the same."""
        return self.path(self.RUN_FILE)

    @property
    def lock_file(self) -> str:
        """The lock file naming the run writing the folder (one writer per folder)."""
        return self.path(self.LOCK_FILE)

    @property
    def log_dir(self) -> str:
        """The folder of the run logs (what Beam and its workers logged)."""
        return self.path(self.LOG_DIR)

    def relative_shard_file(self, name: str) -> str:
        """A shard's path relative to the folder, as the manifest lists it."""
        return f"{self.DATA_DIR}/{name}{self.SHARD_SUFFIX}"

    def shard_file(self, name: str) -> str:
        """The data file of the shard whose stem is `name`."""
        return self.path(self.relative_shard_file(name))

    def status_file(self, name: str) -> str:
        """The status file a shard gets once its data file is complete."""
        return self.path(self.STATUS_DIR, name + ".json")

    def shard_files_glob(self, split: str = "*") -> str:
        """A glob matching the data files of every shard of `split` (all splits by default)."""
        return self.path(self.DATA_DIR, shard_glob(split) + self.SHARD_SUFFIX)

    def status_files_glob(self) -> str:
        """A glob matching every shard's status file."""
        return self.path(self.STATUS_DIR, "*.json")

    def temp_files_globs(self) -> list[str]:
        """Globs of the temporary files attempts leave while writing (stale once no run holds the lock)."""
        return [self.path(folder, "*" + TEMP_SUFFIX) for folder in (self.DATA_DIR, self.STATUS_DIR)]

    @classmethod
    def entries(cls) -> tuple[str, ...]:
        """Every top-level name a run writes: what --overwrite removes (each kind of folder lists its own)."""
        raise NotImplementedError

    @classmethod
    def kept_on_resume(cls) -> tuple[str, ...]:
        """What a resumed run keeps (each kind of folder lists its own)."""
        raise NotImplementedError

    def load_manifest(self) -> dict[str, Any]:
        """The manifest of a finished run as a dict; FileNotFoundError with a hint when there is none,
        PermissionError when an object store refuses the credentials in use (one line each)."""
        try:
            if not exists(self.manifest_file):
                raise FileNotFoundError(f"{self.manifest_file} not found: is {self.root} the --output_dir of a "
                                        "finished run?")
            return json.loads(read_text(self.manifest_file))
        except Exception as error:
            # TensorFlow's GCS client says 403 as PermissionDeniedError, with the server's whole answer.
            if type(error).__name__ == "PermissionDeniedError":
                raise PermissionError(f"{self.manifest_file}: the object store refused the credentials in use "
                                      "(HTTP 403): grant them read access, or use other credentials") from None
            raise


class OutputLayout(RunFolder):
    """The preprocessing job's --output_dir (see README "Output contract")."""

    DATA_DIR = "data"
    SHARD_SUFFIX = ".tfrecord"
    TRANSFORM_FN_DIR = "transform_fn"
    TRANSFORMED_METADATA_DIR = "transformed_metadata"
    RAW_METADATA_DIR = "metadata"
    TFT_TEMP_DIR = ".tmp"
    # The image index (beam_pipeline/common/image_index.py), written by the first UI start, and its record.
    INDEX_FILE = "index.parquet"
    INDEX_RECORD_FILE = "index.json"
    # The kept columns' spec (tf_serving_input.columns.FeatureSpec), written with the manifest.
    FEATURES_FILE = FEATURES_FILE

    @property
    def features_file(self) -> str:
        """features.json: the kept columns and their keys, for the reader and any Example parser."""
        return self.path(self.FEATURES_FILE)

    # The kept columns' statistics over the train split (tf_serving_input/column_stats.py), when it keeps any.
    COLUMN_STATS_FILE = "column_stats.json"

    @property
    def raw_metadata_dir(self) -> str:
        """The raw schema tensorflow-transform's `raw_feature_spec()` reads."""
        return self.path(self.RAW_METADATA_DIR)

    @property
    def tft_temp_dir(self) -> str:
        """tensorflow-transform's temporary folder when no --temp_location is given."""
        return self.path(self.TFT_TEMP_DIR)

    @property
    def column_stats_file(self) -> str:
        """The kept columns' statistics (train split), read without TensorFlow: `column_stats.load_column_stats`."""
        return self.path(self.COLUMN_STATS_FILE)

    @property
    def index_file(self) -> str:
        """The image index: key -> shard, offset, split, label, ... of every stored image, and the failed rows."""
        return self.path(self.INDEX_FILE)

    @property
    def index_record_file(self) -> str:
        """What vouches for the index: its SHA-256 and what it was built from (the manifest's, the shards')."""
        return self.path(self.INDEX_RECORD_FILE)

    @classmethod
    def entries(cls) -> tuple[str, ...]:
        """Every top-level name a run writes: what --overwrite removes (logs/ and the lock stay); a resumed
        run removes the image index too (not in `kept_on_resume`), which the next UI start builds again."""
        return (cls.DATA_DIR, cls.STATUS_DIR, cls.TRANSFORM_FN_DIR, cls.TRANSFORMED_METADATA_DIR,
                cls.RAW_METADATA_DIR, cls.MANIFEST_FILE, cls.ERRORS_FILE, cls.RUN_FILE, cls.TFT_TEMP_DIR,
                cls.INDEX_FILE, cls.INDEX_RECORD_FILE, cls.FEATURES_FILE, cls.COLUMN_STATS_FILE)

    @classmethod
    def kept_on_resume(cls) -> tuple[str, ...]:
        """What a resumed run keeps: finished shards and their status files (verified before reuse)."""
        return (cls.DATA_DIR, cls.STATUS_DIR, cls.RUN_FILE)


class PredictionLayout(RunFolder):
    """The predict job's --output_dir: Parquet shards of predictions and embeddings."""

    DATA_DIR = "predictions"
    SHARD_SUFFIX = ".parquet"
    LOADS_DIR = "loads"  # loads/TABLE/NAME.json: what loading a shard into TABLE did.
    LOAD_ERRORS_FILE = "load_errors.jsonl"

    def load_result_file(self, table: str, name: str) -> str:
        """What loading shard `name` into `table` did (rows loaded, rows left out, a problem)."""
        return self.path(self.LOADS_DIR, table, name + ".json")

    @property
    def load_errors_file(self) -> str:
        """The rows the last load left out of the database, with their reasons (JSON lines)."""
        return self.path(self.LOAD_ERRORS_FILE)

    @classmethod
    def entries(cls) -> tuple[str, ...]:
        """Every top-level name a run writes (logs/ and the lock stay)."""
        return (cls.DATA_DIR, cls.STATUS_DIR, cls.MANIFEST_FILE, cls.ERRORS_FILE, cls.RUN_FILE, cls.LOADS_DIR,
                cls.LOAD_ERRORS_FILE)

    @classmethod
    def kept_on_resume(cls) -> tuple[str, ...]:
        """What a resumed run keeps: finished shards and their status files."""
        return (cls.DATA_DIR, cls.STATUS_DIR, cls.RUN_FILE)


class QualityLayout(RunFolder):
    """The quality job's --output_dir: per-shard signals, the pairs found, and the reports (README "Quality")."""

    DATA_DIR = "signals"  # signals/{job shard stem}.parquet: one row per image of that job shard.
    SHARD_SUFFIX = ".parquet"
    PAIRS_DIR = "pairs"  # pairs/pairs-*: the pair steps' text output, "key_a key_b distance" a line.
    DUPLICATE_GROUPS_FILE = "duplicate_groups.parquet"
    IMAGE_FLAGS_FILE = "image_flags.parquet"
    SUMMARY_FILE = "summary.json"
    CLEAN_SPLIT_FILE = "clean_split.csv"
    REPORT_FILE = "report.html"
    LABEL_ERRORS_FILE = "suspected_label_errors.parquet"  # Empty without --predictions_dir.

    @property
    def pairs_prefix(self) -> str:
        """The file prefix the pair steps write under (one or more text files)."""
        return self.path(self.PAIRS_DIR, "pairs")

    @property
    def pairs_glob(self) -> str:
        """A glob matching every file of the pairs found."""
        return self.pairs_prefix + "*"

    @property
    def embedding_pairs_prefix(self) -> str:
        """The file prefix of the candidate pairs by embedding signature (with --predictions_dir)."""
        return self.path(self.PAIRS_DIR, "embedding")

    @classmethod
    def reports(cls) -> tuple[str, ...]:
        """The end-of-run files, written last: each is complete once its name exists (written then renamed)."""
        return (cls.DUPLICATE_GROUPS_FILE, cls.IMAGE_FLAGS_FILE, cls.LABEL_ERRORS_FILE, cls.CLEAN_SPLIT_FILE,
                cls.REPORT_FILE, cls.SUMMARY_FILE)

    @classmethod
    def entries(cls) -> tuple[str, ...]:
        """Every top-level name a run writes (logs/ and the lock stay)."""
        return (cls.DATA_DIR, cls.STATUS_DIR, cls.PAIRS_DIR, cls.MANIFEST_FILE, cls.ERRORS_FILE, cls.RUN_FILE,
                *cls.reports())

    @classmethod
    def kept_on_resume(cls) -> tuple[str, ...]:
        """What a resumed run keeps: finished signal shards and their status files (verified before reuse)."""
        return (cls.DATA_DIR, cls.STATUS_DIR, cls.RUN_FILE)
