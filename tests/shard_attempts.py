"""Attempts at one shard file, for racing tests: light enough (no TensorFlow) for spawned processes to import."""

from beam_pipeline.common.shard_file import ShardFileWriter
from tf_serving_input.layout import OutputLayout

NAME = "train-00000-of-00001"
RECORDS = [bytes([i]) * (1000 + i) for i in range(50)]


def write_shard(root, barrier=None):
    """One attempt at shard NAME: writes RECORDS, waits for the others, publishes; returns the status."""
    layout = OutputLayout(root)
    with ShardFileWriter(layout, NAME) as shard:
        for record in RECORDS:
            shard.write_record(record)
        if barrier is not None:
            barrier.wait(timeout=60)  # Every attempt publishes at the same moment.
        return shard.publish({"rows": len(RECORDS), "failed": []})


def attempt(root, barrier):
    """A process's attempt (the target of multiprocessing.Process)."""
    write_shard(root, barrier)
