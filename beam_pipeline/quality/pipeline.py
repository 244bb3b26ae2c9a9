"""Assembles the quality job's pipeline: the signals of each job shard, then the near-duplicate pairs over them.

    signals:  RecordShard -> ComputeShardSignals -> signals/{shard}.parquet (pixels never leave the worker)
    pairs:    each written signals file -> ReadHashes (id, hash) -> FindHashPairs (band GroupByKey)
              -> pairs/pairs-* "key_a key_b distance" lines

One pipeline, not two: the pair steps run in the worker processes the signals started (a second pipeline
started its own: ~2.5 s of fixed cost a run on a 2-core machine, most of it importing Beam again). The
pair steps read only the key and hash columns: what crosses the shuffle is two integers an image.
"""


from __future__ import annotations

from collections.abc import Iterator

import apache_beam as beam

from beam_pipeline.common.job_shards import RecordShard
from beam_pipeline.quality.pairs import FindHashPairs, signed
from beam_pipeline.quality.signal_shards import ComputeShardSignals, read_table
from tf_serving_input.layout import QualityLayout


def key_id(key: str) -> int:
    """A row key (16 hex digits) as the signed 64-bit integer that crosses the shuffle."""
    return signed(int(key, 16))


def id_key(value: int) -> str:
    """The inverse of `key_id`."""
    return f"{value & 0xFFFFFFFFFFFFFFFF:016x}"


def build_quality_pipeline(pipeline: beam.Pipeline, layout: QualityLayout, preprocess: dict,
                           shards: list[RecordShard], max_distance: int, band_bits: int, band_step: int,
                           max_bucket: int, min_contrast: float, prediction_files: list[str] = (),
                           embedding_hash_distance: int = 16) -> None:
    """Adds the signals steps (one signals file per job shard), then the pair steps over the files written.

    With `prediction_files` (the predict job's shards), candidate pairs by embedding signature as well.
    """
    signal_files = (pipeline
                    | "ShardTasks" >> beam.Create(shards)
                    # RecordShard
                    | "SpreadShards" >> beam.Reshuffle()
                    # RecordShard, one worker each
                    | "ComputeSignals" >> beam.ParDo(ComputeShardSignals(layout.root, preprocess))
                    # status dict of each written shard
                    | "SignalFiles" >> beam.Map(lambda status: layout.shard_file(status["name"])))
                    # path of its signals file
    add_pair_steps(pipeline, layout, signal_files, max_distance, band_bits, band_step, max_bucket, min_contrast,
                   prediction_files, embedding_hash_distance)


class ReadHashes(beam.DoFn):
    """A signals file -> (key id, hash) of each image that is not near-constant (see pairs: huge buckets)."""

    def __init__(self, min_contrast: float) -> None:
        self._min_contrast = min_contrast

    def setup(self) -> None:
        from beam_pipeline.common.fast_exit import skip_final_collection

        skip_final_collection()

    def process(self, path: str) -> Iterator[tuple[int, int]]:
        try:
            table = read_table(path, ["key", "phash", "contrast"])
        except Exception as error:  # noqa: BLE001 - Beam and pyarrow wrap their errors in their own types.
            # Read right after it was published: gone or changed since (an object store's late view,
            # another process). The rerun checks each signals file against its status and rewrites it.
            raise ValueError(f"the signals file {path} cannot be read ({error}): run the same command again "
                             "to measure its shard again") from None
        for key, phash, contrast in zip(*(table.column(name).to_pylist() for name in table.column_names),
                                        strict=True):
            if contrast >= self._min_contrast:
                yield key_id(key), phash


def format_pair(pair: tuple[int, int, int]) -> str:
    """(id_a, id_b, distance) -> 'key_a key_b distance'."""
    a, b, distance = pair
    return f"{id_key(a)} {id_key(b)} {distance}"


def format_oversized(bucket: tuple[int, int]) -> str:
    """(band key, size) -> 'band value size'."""
    key, size = bucket
    return f"{key >> 32} {key & 0xFFFFFFFF} {size}"


def add_pair_steps(pipeline: beam.Pipeline, layout: QualityLayout, signal_files: beam.PCollection,
                   max_distance: int, band_bits: int, band_step: int, max_bucket: int,
                   min_contrast: float, prediction_files: list[str] = (),
                   embedding_hash_distance: int = 16) -> None:
    """Adds the pair-finding steps over the signals files (paths); pairs and oversized buckets as text files."""
    # Spanning edges: the hash pairs only join groups (findings.py's union-find).
    find = FindHashPairs(max_distance, band_bits, band_step, max_bucket, spanning=True)
    found = (signal_files
             # path of a signals file
             | "ReadHashes" >> beam.ParDo(ReadHashes(min_contrast))
             # (key id, hash)
             | "FindPairs" >> find)
             # (key id a, key id b, distance)
    _ = (found
         | "FormatPairs" >> beam.Map(format_pair)
         # "key_a key_b distance"
         | "WritePairs" >> beam.io.WriteToText(layout.pairs_prefix, file_name_suffix=".txt"))
    _ = (find.oversized
         | "FormatOversized" >> beam.Map(format_oversized)
         # "band value size"
         | "WriteOversized" >> beam.io.WriteToText(layout.path(layout.PAIRS_DIR, "oversized"),
                                                   file_name_suffix=".txt"))
    if not prediction_files:
        return
    from beam_pipeline.quality.embedding_pairs import ReadEmbeddingHashes

    _ = (pipeline
         | "PredictionFiles" >> beam.Create(list(prediction_files))
         # path of a predictions shard
         | "SpreadPredictionFiles" >> beam.Reshuffle()
         # path
         | "ReadEmbeddingHashes" >> beam.ParDo(ReadEmbeddingHashes())
         # (key id, embedding signature)
         # Every candidate pair, copies' too: each is verified and counted as a neighbour on its own.
         | "FindEmbeddingPairs" >> FindHashPairs(embedding_hash_distance, band_bits, band_step, max_bucket,
                                                 collapse_copies=False)
         # (key id a, key id b, signature distance)
         | "FormatEmbeddingPairs" >> beam.Map(format_pair)
         # "key_a key_b distance"
         | "WriteEmbeddingPairs" >> beam.io.WriteToText(layout.embedding_pairs_prefix, file_name_suffix=".txt"))
