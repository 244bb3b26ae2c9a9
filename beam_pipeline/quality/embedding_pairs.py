"""With --predictions_dir: near-duplicates by embedding cosine, and suspected label errors.

The predict job's unit-length embeddings are signed by random hyperplanes (SimHash: 64 fixed hyperplanes,
bit i set when the embedding is on hyperplane i's positive side), so two embeddings at angle t differ in
about 64 t / pi bits. The same banded pair finding as the perceptual hash proposes candidate pairs from
these signatures (`--embedding_hash_distance` bits; only keys and signatures cross the shuffle); the
launching process then verifies each candidate by the real cosine distance, reading only the embeddings of
images in candidate pairs:

- pairs within `--embedding_distance` join the duplicate groups (as `near`);
- every verified candidate within `--label_error_distance` is a neighbour; an image with at least
  MIN_NEIGHBOURS labelled neighbours, more than half of which carry one label other than its own, is a
  suspected label error. Neighbours are those the bands propose, not an exact k-nearest search: a sub-
  quadratic approximation (close neighbours are the likeliest to be proposed).
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Iterator
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from beam_pipeline.quality.pairs import as_signed

SIMHASH_SEED = 22  # Fixed: the same embedding gets the same signature on every run and worker.
MIN_NEIGHBOURS = 3


def simhash(embeddings: np.ndarray) -> np.ndarray:
    """float [N, D] embeddings -> int64 [N] 64-bit random-hyperplane signatures (two's complement)."""
    planes = np.random.default_rng(SIMHASH_SEED).standard_normal((64, embeddings.shape[1])).astype(np.float32)
    bits = (np.asarray(embeddings, np.float32) @ planes.T) > 0
    weights = np.uint64(1) << np.arange(64, dtype=np.uint64)
    return as_signed(np.bitwise_or.reduce(np.where(bits, weights, np.uint64(0)), axis=1))


def read_predictions(path: str, keys: set[str] | None = None) -> pa.Table:
    """key, label and embedding columns of a predictions shard (only `keys`' rows when given)."""
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        table = pq.read_table(io.BytesIO(f.read()), columns=["key", "label", "embedding"])
    if keys is not None:
        # Typed: an empty set (no candidate pairs) would make a null-typed array, which is_in refuses.
        table = table.filter(pc.is_in(table.column("key"), value_set=pa.array(sorted(keys), pa.string())))
    return table


def embeddings_of(table: pa.Table) -> np.ndarray:
    """The embedding column as float32 [N, D]."""
    column = table.column("embedding").combine_chunks()
    size = column.type.list_size
    return np.asarray(column.flatten().to_numpy(zero_copy_only=False), np.float32).reshape(-1, size)


class ReadEmbeddingHashes(beam.DoFn):
    """A predictions shard -> (key id, signature) of each image."""

    def process(self, path: str) -> Iterator[tuple[int, int]]:
        from beam_pipeline.quality.pipeline import key_id

        table = read_predictions(path)
        if table.num_rows == 0:
            return
        for key, signature in zip(table.column("key").to_pylist(), simhash(embeddings_of(table)).tolist(),
                                  strict=True):
            yield key_id(key), signature


def verified_neighbours(candidates: Iterable[tuple[str, str]], paths: list[str],
                        max_distance: float) -> list[tuple[str, str, float]]:
    """(key_a, key_b, cosine distance) of the candidates within `max_distance`, by the real embeddings."""
    candidates = list(candidates)
    needed = {key for pair in candidates for key in pair}
    vectors: dict[str, np.ndarray] = {}
    for path in paths:
        table = read_predictions(path, needed)
        vectors.update(zip(table.column("key").to_pylist(), embeddings_of(table), strict=True))
    out = []
    for a, b in candidates:
        if a in vectors and b in vectors:
            distance = 1.0 - float(np.dot(vectors[a], vectors[b]))
            if distance <= max_distance:
                out.append((a, b, round(distance, 6)))
    return out


def suspected_label_errors(neighbours: list[tuple[str, str, float]], labels: dict[str, str]) -> list[dict[str, Any]]:
    """Images whose labelled neighbours mostly carry one other label: key, label, that label, its share, count."""
    around: dict[str, list[str]] = {}
    for a, b, _ in neighbours:
        around.setdefault(a, []).append(b)
        around.setdefault(b, []).append(a)
    suspects = []
    for key in sorted(around):
        own = labels.get(key, "")
        theirs = [labels.get(other, "") for other in around[key]]
        theirs = [label for label in theirs if label]
        if not own or len(theirs) < MIN_NEIGHBOURS:
            continue
        counts: dict[str, int] = {}
        for label in theirs:
            counts[label] = counts.get(label, 0) + 1
        top, count = max(counts.items(), key=lambda item: (item[1], item[0]))
        if top != own and count / len(theirs) > 0.5:
            suspects.append({"key": key, "label": own, "neighbour_label": top, "share": count / len(theirs),
                             "neighbours": len(theirs)})
    return suspects
