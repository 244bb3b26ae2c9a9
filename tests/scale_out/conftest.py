"""What the standing-cluster fault tests share: a slow dataset and one local reference run over it.

The Flink TaskManager kill (test_flink_cluster.py) and the Spark worker kill (test_spark_cluster.py) run the
same slow dataset with the same flags, so one uninterrupted local run is the reference of both: the first
test to need it starts it (in the background, while its cluster deals with the kill and the CPUs are mostly
idle), a later one finds it done. Run in one pytest process (scripts/flink_integration_test.sh does), the
step pays for one reference, not two.
"""

import dataclasses
import pathlib
import signal
import subprocess

import pytest

import scaleout


@dataclasses.dataclass
class SlowDataset:
    """The slow dataset in `folder` (the runs' cwd), its flags, and the local reference run over it."""

    folder: pathlib.Path
    csv_path: pathlib.Path
    rows: int
    flags: tuple
    _reference: subprocess.Popen | None = None
    _reference_done: bool = False

    @property
    def reference(self):
        """The uninterrupted local run's output folder (complete once `await_reference` returned)."""
        return self.folder / "out_local"

    def job(self, out_name, *runner_flags):
        """The command's arguments for a run into `folder/out_name` (relative paths: the runs' cwd is `folder`)."""
        return (self.csv_path.name, out_name, *self.flags, *runner_flags)

    def start_reference(self):
        """Starts the local reference run, unless it has been started already."""
        if self._reference is None and not self._reference_done:
            self._reference = scaleout.start_job(self.csv_path, self.reference, *self.flags, cwd=self.folder)

    def await_reference(self, timeout=600):
        """Waits for the local reference run (started now if it was not); fails the test if it failed."""
        self.start_reference()
        if not self._reference_done:
            result = scaleout.finish_job(self._reference, timeout=timeout)
            self._reference, self._reference_done = None, result.returncode == 0
            assert result.returncode == 0, result.stderr[-3000:]
        return self.reference

    def stop(self):
        if self._reference is not None and self._reference.poll() is None:
            scaleout.signal_group(self._reference.pid, signal.SIGKILL)


@pytest.fixture(scope="session")
def slow_dataset(tmp_path_factory):
    """The slow dataset, shared by the standing clusters' kill tests (its reference run made once)."""
    folder = tmp_path_factory.mktemp("slow_dataset")
    csv_path, rows = scaleout.make_slow_dataset(folder)
    flags = ("--image_size", "32", "--num_shards", "12", "--no-jpeg_shrink_on_load",  # 24 shards
             *scaleout.small_step_flags(folder))
    dataset = SlowDataset(folder, csv_path, rows, flags)
    yield dataset
    dataset.stop()  # A failed test must not leave the reference running.
