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

import dataclasses
import io
import math
from collections.abc import Callable, Iterable, Iterator
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


# The calibrated --embedding_distance (auto): CALIBRATION_FACTOR x the distance within which the closest
# CALIBRATION_QUANTILE of labelled images have a neighbour of another label, at most AUTO_MAX_DISTANCE (the
# former fixed default). Two images of different labels are (label errors aside) different pictures, so
# that distance is how close different pictures come in this embedding space; a near-duplicate must be
# closer. Pairs the hash or the digest calls one picture are left out: a copy carrying another label is
# a label conflict, not a measure of different pictures. The quantile, not the minimum, keeps a few
# label errors from pulling the distance to zero.
AUTO_MAX_DISTANCE = 0.05
CALIBRATION_QUANTILE = 0.05
CALIBRATION_FACTOR = 0.5
MIN_CALIBRATION_IMAGES = 20  # Fewer labelled images: AUTO_MAX_DISTANCE, uncalibrated.
# The embedding pairs do not separate the labels when more than this share of them (both images labelled,
# not one picture by hash or digest) join different labels.
MAX_CROSS_LABEL_SHARE = 0.25
MIN_PAIRS_FOR_SHARE = 4


def verify_distance(embedding_distance: float | None, label_error_distance: float) -> float:
    """The largest cosine distance the candidates are verified to: room for the calibration when auto."""
    wanted = embedding_distance if embedding_distance is not None else AUTO_MAX_DISTANCE / CALIBRATION_FACTOR
    return max(wanted, label_error_distance)


def nearest_other_label(neighbours: Iterable[tuple[str, str, float]], labels: dict[str, str],
                        same_picture: Callable[[str, str], bool]) -> dict[str, float]:
    """key -> cosine distance to its nearest verified neighbour of another (non-empty) label, one picture excepted."""
    nearest: dict[str, float] = {}
    for a, b, distance in neighbours:
        label_a, label_b = labels.get(a, ""), labels.get(b, "")
        if not label_a or not label_b or label_a == label_b or same_picture(a, b):
            continue
        for key in (a, b):
            nearest[key] = min(distance, nearest.get(key, math.inf))
    return nearest


@dataclasses.dataclass(frozen=True)
class EmbeddingDistance:
    """The --embedding_distance used: the value, where it came from (flag, calibrated, uncalibrated), why."""

    distance: float
    origin: str
    note: str


def choose_distance(flag: float | None, neighbours: list[tuple[str, str, float]], labels: dict[str, str],
                    same_picture: Callable[[str, str], bool], verified_to: float) -> EmbeddingDistance:
    """The flag's value when given; else the calibrated distance (module comment above)."""
    if flag is not None:
        return EmbeddingDistance(flag, "flag", f"--embedding_distance {flag:g}")
    labelled = sum(1 for label in labels.values() if label)
    if labelled < MIN_CALIBRATION_IMAGES:
        return EmbeddingDistance(AUTO_MAX_DISTANCE, "uncalibrated",
                                 f"{labelled} labelled images, fewer than {MIN_CALIBRATION_IMAGES} to calibrate from: "
                                 f"{AUTO_MAX_DISTANCE:g}")
    nearest = nearest_other_label(neighbours, labels, same_picture)
    # Every labelled image counts; one with no other-label neighbour verified lies beyond `verified_to`.
    distances = sorted(nearest.get(key, math.inf) for key, label in labels.items() if label)
    quantile = distances[int(CALIBRATION_QUANTILE * (len(distances) - 1))]
    distance = round(min(AUTO_MAX_DISTANCE, CALIBRATION_FACTOR * quantile), 6)
    seen = f"{quantile:.4g}" if math.isfinite(quantile) else f"beyond {verified_to:g}"
    return EmbeddingDistance(distance, "calibrated",
                             f"{CALIBRATION_QUANTILE:.0%} of {labelled} labelled images have a neighbour of another "
                             f"label within {seen}; {CALIBRATION_FACTOR:g} x that, at most {AUTO_MAX_DISTANCE:g}")


def cross_label_share(pairs: Iterable[tuple[str, str, float]], labels: dict[str, str],
                      same_picture: Callable[[str, str], bool]) -> tuple[float | None, int]:
    """(share of the pairs that join different labels, pairs counted): both images labelled, not one picture.

    None when fewer than MIN_PAIRS_FOR_SHARE pairs count.
    """
    counted = mixed = 0
    for a, b, _ in pairs:
        label_a, label_b = labels.get(a, ""), labels.get(b, "")
        if not label_a or not label_b or same_picture(a, b):
            continue
        counted += 1
        mixed += label_a != label_b
    return (mixed / counted if counted >= MIN_PAIRS_FOR_SHARE else None), counted
