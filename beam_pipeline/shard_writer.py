"""The per-shard DoFn: read, decode and preprocess each row's image, write the shard.

One call handles one shard's rows, so pixels never leave the worker that
decoded them: the shard file is written here, and what the statistics need
goes out (7 integers per image) through a tagged output to
tensorflow-transform's analysis. A bad row never raises: it is recorded, with its
reason, in the shard's status file.
"""

import hashlib
import json
import os
import time

import apache_beam as beam
import numpy as np
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from beam_pipeline import source as csv_source
from beam_pipeline.analysis import DESIRED_BATCH_SIZE, to_record_batch
from beam_pipeline.records import frame_record, iter_records, make_example, parse_example
from tf_serving_input import features
from tf_serving_input.normalization import MOMENTS

STATS_TAG = "stats"
# Never read more than this from one file: a huge file is refused, not loaded.
DEFAULT_MAX_FILE_BYTES = 256 * 1024 * 1024
# Rows preprocessed per TensorFlow call: each call costs ~0.3 ms of Python and dispatch on top
# of ~3 ms of work; 8 per call measured 2.5-2.6 vs 2.8-3.4 ms per image. The byte budget bounds
# the encoded files held at once.
ROWS_PER_CALL = 8
BYTES_PER_CALL = 32 * 1024 * 1024


def shard_paths(output_dir, name):
    """(data file, status file) of the shard `name` in `output_dir`."""
    return (FileSystems.join(output_dir, features.DATA_DIR, name + features.SHARD_SUFFIX),
            FileSystems.join(output_dir, features.SHARD_STATUS_DIR, name + ".json"))


def read_image_bytes(path, max_bytes=DEFAULT_MAX_FILE_BYTES):
    """Reads a file through Beam's filesystems; raises ValueError with a readable reason."""
    if not path:
        raise ValueError("empty path")
    try:
        with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
            data = f.read(max_bytes + 1)
    except FileNotFoundError:
        raise ValueError("file not found") from None
    except IsADirectoryError:
        raise ValueError("is a directory, not a file") from None
    except PermissionError:
        raise ValueError("permission denied") from None
    except Exception as error:  # Remote filesystems wrap errors in their own types.
        text = str(error)
        if "not found" in text.lower() or "no such file" in text.lower() or "404" in text:
            raise ValueError("file not found") from None
        raise ValueError(f"cannot read the file: {text.splitlines()[0] if text else type(error).__name__}") from None
    if len(data) > max_bytes:
        raise ValueError(f"file too large: more than {max_bytes} bytes")
    if not data:
        raise ValueError("empty file (0 bytes)")
    return data


def describe_decode_failure(data, error):
    """A readable reason for a decode failure, telling truncated files from corrupt ones."""
    from tf_serving_input.preprocessing import error_reason  # TF is imported on workers only.

    reason = error_reason(error)
    lowered = reason.lower()
    if "jpeg" in lowered and data.startswith(b"\xff\xd8"):
        if not data.rstrip(b"\x00").endswith(b"\xff\xd9"):
            return "truncated JPEG"
        return f"corrupt JPEG ({reason})"
    if "png" in lowered and data.startswith(b"\x89PNG"):
        if b"IEND" not in data[-32:]:
            return "truncated PNG"
        return f"corrupt PNG ({reason})"
    return reason


def _configure_tensorflow_threads():
    """One TF thread per worker process: Beam already runs one worker per core."""
    import tensorflow as tf

    try:
        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    except RuntimeError:
        pass  # TF already started in this process (in-process runners, tests): keep its pools.


class WriteShardFn(beam.DoFn):
    """((split, shard_index), [Row]) -> a shard file, its status file and one summary dict.

    Main output: the shard summary (as written to its status file).
    Tagged output STATS_TAG: for 'train' shards, Arrow RecordBatches for
    tensorflow-transform's analysis: one row holding the shard's total pixel
    moments (label ''), then one row per written image holding its label (zero
    moments). The totals are exact integers, also kept in the status file, so a
    resumed shard re-emits exactly what a freshly written one did without
    decoding anything.
    """

    def __init__(self, output_dir, preprocess_config, shard_counts, max_file_bytes=DEFAULT_MAX_FILE_BYTES,
                 stats_split=csv_source.DEFAULT_SPLIT):
        self._output_dir = output_dir
        self._config = preprocess_config
        self._shard_counts = dict(shard_counts)
        self._max_file_bytes = max_file_bytes
        self._stats_split = stats_split
        self._preprocess = None

    def setup(self):
        _configure_tensorflow_threads()
        import tensorflow as tf

        from tf_serving_input.normalization import pixel_moments
        from tf_serving_input.preprocessing import encode_image, preprocess_image, stored_bytes

        config = self._config
        size = config.image_size
        encoded_spec = (tf.TensorSpec([size, size, 3], tf.uint8) if config.image_format == "raw"
                        else tf.TensorSpec([], tf.string))

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def preprocess_and_encode(datas):
            def one(data):
                image = preprocess_image(data, config)
                return encode_image(image, config), pixel_moments(image)

            # parallel_iterations=1: one decoded source image (up to max_pixels) alive at a time.
            return tf.map_fn(one, datas, fn_output_signature=(encoded_spec, tf.TensorSpec([MOMENTS], tf.int64)),
                             parallel_iterations=1)

        self._preprocess = preprocess_and_encode
        self._stored_bytes = stored_bytes
        self._tf_error = tf.errors.OpError

    def _preprocess_datas(self, datas):
        """[(encoded, moments) or ValueError] for file contents, in order, with one TF call when all succeed."""
        if not datas:
            return []
        try:
            encoded, moments = self._preprocess(datas)
            return list(zip(encoded.numpy(), moments.numpy()))
        except Exception:  # noqa: BLE001 - some image failed: redo them one at a time to tell which, and why.
            pass
        results = []
        for data in datas:
            try:
                encoded, moments = self._preprocess([data])
                results.append((encoded.numpy()[0], moments.numpy()[0]))
            except self._tf_error as error:
                results.append(ValueError(describe_decode_failure(data, error)))
            except Exception as error:  # Recorded as "unexpected ..." by the caller, never raised.
                results.append(error)
        return results

    def _process_rows(self, rows):
        """Yields (row, (serialized example, pixel moments) or the exception that failed it), in order.

        Streams: at most ROWS_PER_CALL files (BYTES_PER_CALL bytes) wait for a call, plus the
        file just read. A call that fails is redone one row at a time, so where bad images are
        common their batches cost about twice the TF time.
        """
        pending, datas = [], []  # pending: [row, outcome or None (awaiting its TF call)]

        def flush():
            results = iter(self._preprocess_datas(datas))
            for entry in pending:
                row = entry[0]
                if entry[1] is None:
                    result = next(results)
                    if not isinstance(result, Exception):
                        try:
                            example = make_example(self._stored_bytes(result[0]), self._config.image_format,
                                                   self._config.image_size, self._config.image_size,
                                                   row.source, row.key, row.label)
                            result = (example.SerializeToString(deterministic=True), result[1])
                        except Exception as error:  # Recorded by the caller, never raised.
                            result = error
                    entry[1] = result
                yield row, entry[1]
            pending.clear()
            datas.clear()

        for row in rows:
            try:
                data = read_image_bytes(row.path, self._max_file_bytes)
            except Exception as error:  # Recorded as the row's failure by the caller.
                pending.append([row, error])
                continue
            if datas and (len(datas) >= ROWS_PER_CALL or sum(map(len, datas)) + len(data) > BYTES_PER_CALL):
                yield from flush()
            datas.append(data)
            pending.append([row, None])
        yield from flush()

    def _statistics(self, split, total_moments, labels):
        """The shard's tagged RecordBatches for TFT (nothing for splits other than train)."""
        if split != self._stats_split:
            return
        rows = [(np.asarray(total_moments, np.int64), b"")] + [(np.zeros(MOMENTS, np.int64), label)
                                                               for label in labels]
        for start in range(0, len(rows), DESIRED_BATCH_SIZE):
            batch = rows[start:start + DESIRED_BATCH_SIZE]
            yield beam.pvalue.TaggedOutput(STATS_TAG, to_record_batch([m for m, _ in batch], [lb for _, lb in batch]))

    def process(self, element):
        (split, shard_index), rows = element
        num_shards = self._shard_counts[split]
        name = csv_source.shard_name(split, shard_index, num_shards)
        data_path, status_path = shard_paths(self._output_dir, name)
        rows = sorted(rows, key=lambda row: row.index)  # Same file bytes whatever the shuffle did.
        completed = verified_shard(data_path, status_path, len(rows))
        if completed is not None:
            yield from self._replay(split, *completed)
        else:
            yield from self._write(split, shard_index, num_shards, name, rows, data_path, status_path)

    def _replay(self, split, status, data):
        """A shard an earlier run completed: keep the file, re-emit its statistics from the status."""
        labels = [parse_example(record).features.feature[features.LABEL_TEXT].bytes_list.value[0]
                  for record in iter_records(data)]
        yield from self._statistics(split, status["pixel_moments"], labels)
        yield dict(status, resumed=True)

    def _write(self, split, shard_index, num_shards, name, rows, data_path, status_path):
        started = time.time()
        failed, labels = [], []
        total_moments = np.zeros(MOMENTS, np.int64)
        size = 0
        checksum = hashlib.sha256()
        temp_path = data_path + ".incomplete"
        with FileSystems.create(temp_path, compression_type=CompressionTypes.UNCOMPRESSED) as out:
            for row, outcome in self._process_rows(rows):
                if isinstance(outcome, Exception):  # Any per-row failure is recorded, never raised.
                    error = outcome
                    reason = str(error) if isinstance(error, ValueError) else f"unexpected {type(error).__name__}: {error}"
                    failed.append({"source": row.source, "key": row.key, "line": row.line,
                                   "split": row.split, "error": reason})
                    continue
                record, moments = outcome
                framed = frame_record(record)
                out.write(framed)
                checksum.update(framed)
                size += len(framed)
                total_moments += moments
                labels.append(row.label.encode("utf-8"))
        # The shard gets its final name only once complete, and counts as done only once
        # its status (with the checksum a resumed run verifies) exists.
        _replace(temp_path, data_path)
        status = {
            "name": name, "split": split, "index": shard_index, "num_shards": num_shards,
            "file": f"{features.DATA_DIR}/{name}{features.SHARD_SUFFIX}",
            "rows": len(rows), "records": len(labels), "failed": failed,
            "bytes": size, "sha256": checksum.hexdigest(), "pixel_moments": total_moments.tolist(),
            "started": round(started, 3), "seconds": round(time.time() - started, 3), "worker_pid": os.getpid(),
        }
        _write_json_atomically(status_path, status)
        yield from self._statistics(split, total_moments, labels)
        yield dict(status, resumed=False)


def verified_shard(data_path, status_path, rows):
    """(status, file bytes) when an earlier run completed this shard and its file is intact, else None."""
    try:
        with FileSystems.open(status_path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
            status = json.loads(f.read())
        with FileSystems.open(data_path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
            data = f.read()
    except Exception:  # No status or no file: not complete.
        return None
    if ("pixel_moments" not in status or status.get("rows") != rows or len(data) != status.get("bytes")
            or hashlib.sha256(data).hexdigest() != status.get("sha256")):
        return None
    return status, data


def _replace(source, destination):
    if FileSystems.exists(destination):
        FileSystems.delete([destination])
    FileSystems.rename([source], [destination])


def _write_json_atomically(path, value):
    temp_path = path + ".incomplete"
    with FileSystems.create(temp_path, mime_type="application/json",
                            compression_type=CompressionTypes.UNCOMPRESSED) as f:
        f.write(json.dumps(value, ensure_ascii=False, indent=1).encode("utf-8"))
    _replace(temp_path, path)
