"""What a run on Apache Spark needs beyond Beam's flags, and the master's reachability (no Beam, no TensorFlow).

`--runner SparkRunner --spark_master_url URL` runs a job through Beam's Spark job server, a Java program
that scripts/spark_job_server.sh obtains once into the user's cache (Maven Central serves no Spark job
server jar of Beam's: the script builds a launcher, docs/runners.md). `with_defaults` adds, unless given:
 - `--spark_job_server_jar`: that launcher, when the cache has one (else Beam looks for its own jar);
 - on a master on this machine (spark://127.0.0.1 or localhost), for that launcher: the executors load
   Beam's runner classes from the launcher's lib/ (`spark.executor.extraClassPath`) and the job stages only
   the launcher itself (`--files_to_stage`), instead of the job server's whole classpath (~420 MB of jars
   copied into every executor of every job); the driver binds to the loopback (`spark.driver.host`);
 - `--environment_cache_millis=60000`: an executor keeps its Python SDK worker between tasks (Beam's
   default starts one per task, each importing TensorFlow: 30 workers instead of 1 for the small job).
`unreachable_master` is checked before any work: a spark:// master that accepts no connection is one line
naming it (Spark's own client retries for minutes).
"""

from __future__ import annotations

import glob
import os
import socket
import urllib.parse

SPARK_RUNNERS = ("sparkrunner", "spark")
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
CONNECT_TIMEOUT_S = 3.0
ENVIRONMENT_CACHE = "--environment_cache_millis=60000"


def _value(beam_args: list[str], name: str) -> str | None:
    from beam_pipeline.common.flags import flag_value  # Here: flags imports this module.

    return flag_value(beam_args, name)


def is_spark(beam_args: list[str]) -> bool:
    """Whether the job runs on Beam's SparkRunner."""
    return (_value(beam_args, "runner") or "").lower() in SPARK_RUNNERS


def master_url(beam_args: list[str]) -> str:
    """--spark_master_url, or Beam's default (an in-process Spark, `local[4]`)."""
    return _value(beam_args, "spark_master_url") or "local[4]"


def master_addresses(url: str) -> list[tuple[str, int]]:
    """(host, port) of each master of a spark:// URL (`spark://h1:p1,h2:p2` names standbys); [] for others."""
    if not url.startswith("spark://"):
        return []
    addresses = []
    for part in url[len("spark://"):].rstrip("/").split(","):
        parsed = urllib.parse.urlsplit(f"//{part}")
        try:
            port = parsed.port or 7077
        except ValueError:
            port = 0
        addresses.append((parsed.hostname or "", port))
    return addresses


def job_server_cache(environ: dict[str, str] | None = None) -> str:
    """Where scripts/spark_job_server.sh keeps Spark's jars and the job server launcher."""
    environ = dict(os.environ) if environ is None else environ
    cache = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return environ.get("SPARK_JARS_CACHE") or os.path.join(cache, "beam-image-pipeline", "spark")


def cached_job_server(environ: dict[str, str] | None = None) -> str | None:
    """The launcher jar scripts/spark_job_server.sh built (lib/ beside it), or None."""
    for jar in sorted(glob.glob(os.path.join(glob.escape(job_server_cache(environ)), "launcher-*", "launcher.jar"))):
        if os.path.isdir(os.path.join(os.path.dirname(jar), "lib")):
            return jar
    return None


def with_defaults(beam_args: list[str], environ: dict[str, str] | None = None) -> list[str]:
    """`beam_args` with what a Spark run needs added (the module's docstring); other runners' unchanged."""
    if not is_spark(beam_args):
        return beam_args
    args = list(beam_args)
    jar = _value(args, "spark_job_server_jar")
    if jar is None:
        jar = cached_job_server(environ)
        if jar is not None:
            args.append(f"--spark_job_server_jar={jar}")
    lib = os.path.join(os.path.dirname(jar), "lib") if jar else ""
    on_this_machine = all(host in LOOPBACK_HOSTS for host, _ in master_addresses(master_url(args)) or [("", 0)])
    if jar and os.path.isdir(lib) and on_this_machine:
        given = " ".join(args)
        if _value(args, "files_to_stage") is None and _value(args, "file_to_stage") is None:
            args.append(f"--files_to_stage={jar}")
        if "spark.executor.extraClassPath" not in given:
            args.append(f"--job_server_jvm_property=-Dspark.executor.extraClassPath={lib}/*")
        if "spark.driver.host" not in given:
            args.append("--job_server_jvm_property=-Dspark.driver.host=127.0.0.1")
    if _value(args, "environment_cache_millis") is None:
        args.append(ENVIRONMENT_CACHE)
    return args


def unreachable_master(beam_args: list[str]) -> str | None:
    """Why the job's Spark master cannot be reached (one line naming its URL), or None (reached, or not spark://)."""
    if not is_spark(beam_args):
        return None
    url = master_url(beam_args)
    addresses = master_addresses(url)
    reasons = []
    for host, port in addresses:
        try:
            with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S):
                return None
        except OSError as error:
            reasons.append(f"{host}:{port}: {error.strerror or error}")
    if not addresses:
        return None
    return (f"cannot reach the Spark master {url} ({'; '.join(reasons)}): start it (scripts/spark_cluster.sh "
            "start prints its URL) or check --spark_master_url")
