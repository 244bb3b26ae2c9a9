"""How a local run stops (issue 55): Ctrl-C to the process group, SIGINT to the launcher alone, SIGKILL of it.

    .venv/bin/python scripts/measure_stop.py FOLDER MODE    # MODE: group_int | launcher_int | launcher_kill

FOLDER named `url` gets 30 local 800x600 JPEGs and 8 URL rows a loopback server never answers (workers wait
on them); `heavy`, 10 rows of the 9999x9999 PNG named by $BIG_PNG; any other name, 60
local 2000x1500 JPEGs. The signal goes once a first shard is done. Prints the seconds from the signal until
the launcher exits and until every process below it is gone. Run from the repository root.
"""
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.join(os.getcwd(), "tests"))  # imaging, http_server
import imaging


def make(folder, n=60, size=(1500, 2000)):
    folder.mkdir(parents=True, exist_ok=True)
    csv = folder / "in.csv"
    if csv.exists():
        return csv
    rng = np.random.default_rng(1)
    data = imaging.encode(imaging.photo_like(rng, *size), "JPEG", quality=90)
    rows = []
    for i in range(n):
        (folder / f"p{i}.jpg").write_bytes(data)
        rows.append([f"p{i}.jpg", "ab"[i % 2], "train"])
    imaging.write_csv(csv, ["path", "label", "split"], rows)
    return csv

def make_heavy(folder, n=10):
    folder.mkdir(parents=True, exist_ok=True)
    csv = folder / "in.csv"
    rows = []
    for i in range(n):
        target = folder / f"big{i}.png"
        if not target.exists():
            os.link(os.environ.get("BIG_PNG", "/tmp/runctl/mem/big.png"), target)
        rows.append([target.name, "ab"[i % 2], "train"])
    imaging.write_csv(csv, ["path", "label", "split"], rows)
    return csv

def make_url(folder, server, n=30, stalled=8):
    csv = make(folder, n=n, size=(600, 800))
    rows = [line.split(",") for line in csv.read_text().splitlines()[1:]]
    for i in range(stalled):
        server.route(f"/s/{i}.jpg", __import__("http_server").stall(120))
        rows.append([server.url(f"/s/{i}.jpg"), "a", "train"])
    imaging.write_csv(folder / "url.csv", ["path", "label", "split"], rows)
    return folder / "url.csv"

def children(pid):
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = open(f"/proc/{entry}/stat").read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == pid:
            found.append(int(entry))
    return found

def alive(pid):
    try:
        stat = open(f"/proc/{pid}/stat").read()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"

def main():
    if len(sys.argv) != 3 or sys.argv[2] not in ("group_int", "launcher_int", "launcher_kill"):
        sys.exit(__doc__)
    data, mode = Path(sys.argv[1]), sys.argv[2]
    server = None
    if data.name == "url":
        import http_server
        server = http_server.LoopbackServer()
        csv = make_url(data, server)
    else:
        csv = make_heavy(data) if data.name == "heavy" else make(data)
    out = data / f"out-{mode}"
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "beam_pipeline", "--input_csv", str(csv), "--output_dir", str(out),
           "--image_size", "64", "--num_shards", "16"] + (["--url_allow_private"] if data.name == "url" else [])
    p = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    status = out / "shards"
    while p.poll() is None and not (status.exists() and list(status.glob("*.json"))):
        time.sleep(0.01)
    workers = set()
    for pid in children(p.pid):
        workers.add(pid)
        workers.update(children(pid))
    t0 = time.monotonic()
    {"group_int": lambda: os.killpg(p.pid, signal.SIGINT),
     "launcher_int": lambda: os.kill(p.pid, signal.SIGINT),
     "launcher_kill": lambda: os.kill(p.pid, signal.SIGKILL)}[mode]()
    done_at = None
    shards_at_signal = len(list(status.glob("*.json")))
    while True:
        if done_at is None and p.poll() is not None:
            done_at = time.monotonic() - t0
        if done_at is not None and not any(alive(w) for w in workers):
            break
        time.sleep(0.02)
    gone = time.monotonic() - t0
    err = p.stderr.read()
    print(f"{mode}: launcher exit {done_at:.1f} s (code {p.returncode}), workers {sorted(workers)} gone after "
          f"{gone:.1f} s; "
          f"shards at signal {shards_at_signal}, after {len(list(status.glob('*.json')))}; stderr tail: {err[-300:]!r}")

main()
