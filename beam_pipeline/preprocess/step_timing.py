"""Each --image_step's time per image: measured in the workers, kept in each shard's status, summed at the end.

    times = StepTimes(len(steps))            # in a worker
    times.add(position, seconds)             # each image a step ran on
    status["step_times"] = times.take()      # per shard (then it starts again)
    manifest["step_timing"] = summarize(statuses, steps)     # the launcher
    summary_rows(manifest)                   # the run's summary and `inspect`

The shards' status files are what flows back from the workers on every runner
(the local runner's processes, Flink, Dataflow), so the timings ride in them,
not in Beam metrics (a distribution there gives no percentiles). A shard keeps
a histogram per step in quarter-octave buckets (each ~19 % wide), so p50 and
p99 are within ~10 % whatever the number of images; a resumed shard keeps the
times of the run that wrote it. Each step's share is its seconds over the
seconds the shards took in the workers (reading, decoding, steps, resizing,
writing). Timed only where a step runs as its own call: in a run with a Python
step (a TF step then runs as its own traced call too); a run of TF steps only
fuses them into the one batched TensorFlow call, where they are not timed.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Sequence
from typing import Any

from beam_pipeline.common import terminal

STATUS_KEY = "step_times"
MANIFEST_KEY = "step_timing"
_PER_OCTAVE = 4
_FLOOR = 1e-6  # Seconds of bucket 0: anything faster is counted there.


def _bucket(seconds: float) -> int:
    return max(0, int(math.floor(math.log2(max(seconds, _FLOOR) / _FLOOR) * _PER_OCTAVE)))


def _middle(bucket: int) -> float:
    """The seconds a bucket stands for: its geometric middle."""
    return _FLOOR * 2 ** ((bucket + 0.5) / _PER_OCTAVE)


class StepTimes:
    """One worker's step times since the last `take`, per step position."""

    def __init__(self, count: int) -> None:
        self._count = count
        self._reset()

    def _reset(self) -> None:
        self._histograms: list[collections.Counter[int]] = [collections.Counter() for _ in range(self._count)]
        self._seconds = [0.0] * self._count

    def add(self, position: int, seconds: float) -> None:
        self._histograms[position][_bucket(seconds)] += 1
        self._seconds[position] += seconds

    def take(self) -> list[dict[str, Any]]:
        """A shard status's `step_times` (JSON): per step, images, seconds, {bucket: images}; then starts again."""
        taken = [{"position": position, "images": sum(histogram.values()), "seconds": round(seconds, 6),
                  "histogram": {str(bucket): count for bucket, count in sorted(histogram.items())}}
                 for position, (histogram, seconds) in enumerate(zip(self._histograms, self._seconds))]
        self._reset()
        return taken


def _percentile(histogram: collections.Counter[int], fraction: float) -> float:
    total = sum(histogram.values())
    wanted = max(1, math.ceil(fraction * total))
    seen = 0
    for bucket in sorted(histogram):
        seen += histogram[bucket]
        if seen >= wanted:
            return _middle(bucket)
    return 0.0


def summarize(statuses: Sequence[dict[str, Any]], steps: Sequence[Any]) -> dict[str, Any] | None:
    """The manifest's `step_timing` from the shards' statuses, or None when no shard timed a step.

    `steps`: the run's StepRecords. Per step: images timed, seconds, p50 and p99 (ms an image), and its
    share of the seconds the shards took in the workers.
    """
    timed = [status for status in statuses if status.get(STATUS_KEY)]
    if not timed:
        return None
    worker_seconds = sum(float(status.get("seconds", 0.0)) for status in statuses)
    result = []
    for record in steps:
        histogram: collections.Counter[int] = collections.Counter()
        seconds = 0.0
        for status in timed:
            for entry in status[STATUS_KEY]:
                if entry["position"] == record.position:
                    histogram.update({int(bucket): count for bucket, count in entry["histogram"].items()})
                    seconds += entry["seconds"]
        images = sum(histogram.values())
        result.append({
            "position": record.position, "spec": record.spec, "kind": record.kind, "images": images,
            "seconds": round(seconds, 3),
            "p50_ms": round(_percentile(histogram, 0.5) * 1000, 3) if images else None,
            "p99_ms": round(_percentile(histogram, 0.99) * 1000, 3) if images else None,
            "share": round(seconds / worker_seconds, 4) if worker_seconds > 0 else None})
    return {"steps": result, "worker_seconds": round(worker_seconds, 3)}


def summary_rows(manifest: dict[str, Any]) -> list[tuple[str, str]]:
    """One line per timed step for a summary table: `step N name  p50 .. ms, p99 .. ms an image, ..% of time`."""
    timing = manifest.get(MANIFEST_KEY)
    if not timing:
        return []
    rows = []
    for step in timing["steps"]:
        name = terminal.shown(step["spec"].rpartition(":")[2], 12)  # The user's text: escaped and cut.
        if not step["images"]:
            rows.append((f"step {step['position'] + 1} {name}", "not timed (no image reached it)"))
            continue
        share = f", {step['share']:.0%} of the workers' time" if step["share"] is not None else ""
        rows.append((f"step {step['position'] + 1} {name}",
                     f"p50 {step['p50_ms']:.3g} ms, p99 {step['p99_ms']:.3g} ms an image ({step['images']} "
                     f"images){share}"))
    return rows
