"""How every measurement is taken: interleaved repetitions, wall time, peak RSS, marginal rates.

A ratio is never one sample. `in_turn` runs baseline, subject, baseline, subject, ... so that
both sides of each pair see the same moment of a machine whose speed drifts by tens of percent
over minutes (other work shares it); each pair gives one sample, and `Ratio` keeps them all and
reports their median and range. Nothing here asserts a timing.
"""

import dataclasses
import gc
import os
import socket
import statistics
import subprocess
import sys
import threading
import time

from benchmarks.targets import TARGETS, met, target_text

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORES = os.cpu_count() or 1


@dataclasses.dataclass
class Ratio:
    """One measured ratio: a sample per interleaved repetition, on one image set (or none)."""

    name: str
    images: str
    samples: list
    note: str = ""
    exact: bool = False  # Arithmetic, not a timing (PSNR): one sample is the whole truth.

    @property
    def median(self):
        return statistics.median(self.samples)

    @property
    def low(self):
        return min(self.samples)

    @property
    def high(self):
        return max(self.samples)

    @property
    def met(self):
        """Whether the median meets the target; None where there is no target."""
        return met(self.name, self.median)

    def summary(self):
        """'0.91 (0.88-0.95 over 3)', or the one value of a deterministic measurement."""
        if len(self.samples) == 1:
            return f"{self.median:.2f}"
        return f"{self.median:.2f} ({self.low:.2f}-{self.high:.2f} over {len(self.samples)})"


class Results:
    """What a run found: ratios, rates for the throughput table and chart, extra tables, the log."""

    def __init__(self):
        self.ratios = []
        self.rates = {}  # label -> [samples], per second
        self.tables = {}  # section title -> markdown lines
        self.lines = []

    def say(self, text):
        print(text, flush=True)
        self.lines.append(text)

    def ratio(self, name, images, samples, note="", exact=False):
        """Records a ratio and logs its median, range and target; returns it.
        KeyError at once for a name TARGETS lacks (the report could not describe it, an hour later)."""
        if name not in TARGETS:
            raise KeyError(f"{name!r} is not in benchmarks/targets.py TARGETS")
        ratio = Ratio(name, images, list(samples), note, exact)
        self.ratios.append(ratio)
        verdict = {True: "median met", False: "median NOT met", None: ""}[ratio.met]
        target = f"target {target_text(name)}: {verdict}" if verdict else "no target"
        self.say(f"   {name} [{images}]: {ratio.summary()}, {target}")
        return ratio

    def rate(self, label, samples):
        self.rates.setdefault(label, []).extend(samples)

    def median_rates(self):
        return {label: statistics.median(samples) for label, samples in self.rates.items()}


def in_turn(repetitions, steps, log=None):
    """Runs every step once per repetition, in order, repetition after repetition.

    With steps {baseline, subject} that is baseline, subject, baseline, subject, ...; a section
    with several pairs lists them all, each subject right after its baseline. `steps`:
    {name: function(repetition) -> sample}. Returns {name: [one sample per repetition]}.
    `log(repetition, {name: this repetition's sample})` is called after each repetition.
    """
    samples = {name: [] for name in steps}
    for repetition in range(repetitions):
        for name, step in steps.items():
            samples[name].append(step(repetition))
        if log is not None:
            log(repetition, {name: values[-1] for name, values in samples.items()})
    return samples


def median(values):
    return statistics.median(values)


def settle():
    """Flushes dirty pages first: the kernel writing back an earlier run's gigabytes of output
    would otherwise take CPU from whatever is measured next."""
    os.sync()


def read_through(folder, chunk=1 << 22):
    """Reads every file under `folder` once, untimed, so that the page cache holds it; returns the bytes read.

    The machines these benchmarks run on page out file pages left idle (DAMON's `pageout` scheme, in
    /sys/kernel/mm/damon: pages idle for ~60 s, up to 128 MB/s), and a cold read is slow there: the 2.9 GB of
    the quality section's 20,000 records took 42.6 s from disk and 0.5 s from the cache (2-core VM,
    2026-12-02). A timed run whose input was partly paged out measures the disk, by how much depending on
    what ran before it. The reader's baselines loop over their records (from the cache after the first
    pass), so a subject that reads the same records starts from the cache as well.
    """
    total = 0
    for root, _, names in os.walk(folder):
        for name in sorted(names):
            with open(os.path.join(root, name), "rb") as f:
                while data := f.read(chunk):
                    total += len(data)
    return total


def process_tree(root_pid):
    """The pids of a process and all its descendants, from /proc."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parent = int(f.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(parent, []).append(int(entry))
            except (OSError, IndexError, ValueError):
                continue
    found, stack = [], [root_pid]
    while stack:
        pid = stack.pop()
        found.append(pid)
        stack.extend(children.get(pid, []))
    return found


def proc_field_bytes(pid, file, field):
    """A 'Field:   N kB' line of /proc/PID/FILE in bytes; 0 when the process is gone."""
    try:
        with open(f"/proc/{pid}/{file}") as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def tree_rss_bytes(root_pid):
    """Resident memory of a process and all its descendants, from /proc."""
    return sum(proc_field_bytes(pid, "status", "VmRSS:") for pid in process_tree(root_pid))


def run_measured(command):
    """Runs a command from the repository; returns (wall seconds, peak RSS of its process tree).
    RuntimeError with the end of its stderr when it fails."""
    settle()
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    peak = [0]

    def sample():
        while process.poll() is None:
            peak[0] = max(peak[0], tree_rss_bytes(process.pid))
            time.sleep(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, stderr = process.communicate()
    wall = time.perf_counter() - started
    sampler.join()
    if process.returncode != 0:
        raise RuntimeError(f"failed: {' '.join(map(str, command))}\n{stderr[-3000:]}")
    return wall, peak[0]


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_listening(port, process, log_path, timeout=300):
    """Returns once 127.0.0.1:`port` accepts a connection; RuntimeError with the end of `log_path` when
    `process` exits or `timeout` seconds pass first (the process is then killed)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    exited = process.poll()
    process.kill()
    with open(log_path, errors="replace") as log:
        why = f"exited {exited}" if exited is not None else f"did not listen on {port} in {timeout} s"
        raise RuntimeError(f"{' '.join(map(str, process.args))} {why}:\n{log.read()[-2000:]}")


def python_command(*args):
    """A command running this Python (the worktree's modules first on its path, as for this process)."""
    return [sys.executable, *map(str, args)]


def marginal_rate(small, big):
    """Items/s between two runs of different size, (items, seconds) each: start-up cost cancels out."""
    (items_small, seconds_small), (items_big, seconds_big) = small, big
    if seconds_big <= seconds_small:  # Too little work to see past the noise (tiny smoke runs).
        return items_big / seconds_big
    return (items_big - items_small) / (seconds_big - seconds_small)


def timed(function, *args):
    """(seconds, result) of one call."""
    started = time.perf_counter()
    result = function(*args)
    return time.perf_counter() - started, result


def dataset_rate(dataset, seconds, warm_up=3):
    """Images/s drawn from an (images, labels) batched, repeating dataset over about `seconds`.

    A fresh iterator each call, dropped afterwards: an idle iterator's prefetch threads would
    otherwise keep working while the next pipeline is measured.
    """
    iterator = iter(dataset)
    for _ in range(warm_up):
        next(iterator)
    settle()
    count, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        images, _ = next(iterator)
        count += int(images.shape[0])
    rate = count / (time.perf_counter() - started)
    del iterator
    gc.collect()
    return rate


def rate_step(dataset, seconds):
    """A step for `in_turn`: the dataset's rate over `seconds`."""
    return lambda _repetition: dataset_rate(dataset, seconds)


def epoch_times(make, epochs):
    """Seconds from building a dataset with `make()` to the end of each of `epochs` full passes."""
    started = time.perf_counter()
    dataset = make()
    ends = []
    for _ in range(epochs):
        for _ in dataset:
            pass
        ends.append(time.perf_counter() - started)
    del dataset
    gc.collect()
    return ends


def _busy_cpu_seconds():
    """CPU seconds the whole machine has spent busy since boot (/proc/stat)."""
    with open("/proc/stat") as f:
        fields = [int(value) for value in f.readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def _own_cpu_seconds():
    """CPU seconds of this process and the children it has waited for (their children included)."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def tree_cpu_seconds(root_pid):
    """CPU seconds of a live process tree, each process's own and its reaped children's (/proc)."""
    total = 0.0
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                children.setdefault(int(fields[1]), []).append((int(entry), fields))
            except (OSError, IndexError, ValueError):
                continue
    stack = [root_pid]
    seen = {root_pid}
    try:
        with open(f"/proc/{root_pid}/stat") as f:
            root_fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    total += sum(int(value) for value in root_fields[11:15])
    while stack:
        for pid, fields in children.get(stack.pop(), []):
            if pid not in seen:
                seen.add(pid)
                stack.append(pid)
                total += sum(int(value) for value in fields[11:15])  # utime stime cutime cstime
    return total / os.sysconf("SC_CLK_TCK")


class MachineShare:
    """How much of the machine's CPU time processes outside this benchmark took while it ran.

    Busy time of the whole machine (/proc/stat) less this process's and its waited-for children's,
    less what `add_own` is told (the embedded PostgreSQL server, which is no child of ours).
    """

    def __init__(self):
        self.started = time.monotonic()
        self.busy = _busy_cpu_seconds()
        self.own = _own_cpu_seconds()
        self.extra = 0.0

    def add_own(self, seconds):
        self.extra += seconds

    def others_fraction(self):
        wall = time.monotonic() - self.started
        own = _own_cpu_seconds() - self.own + self.extra
        return max(0.0, _busy_cpu_seconds() - self.busy - own) / (wall * CORES)
