"""Runner set-up shared by the jobs: the local FnApiRunner with the job's options, and quiet logs."""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions

from beam_pipeline.common.flags import DEFAULT_RUNNER, flag_value

if TYPE_CHECKING:
    from apache_beam.runners.portability.fn_api_runner.fn_runner import FnApiRunner


def local_runner(pipeline_options: PipelineOptions) -> FnApiRunner | None:
    """The FnApiRunner, set up to hand the pipeline options to its worker processes; None otherwise.

    Beam's FnApiRunner starts its multi_processing workers with empty pipeline
    options, so Beam's filesystems there would not see --s3_endpoint_url, S3
    credentials and the like: workers could not read the images. This gives
    them the options, as a portable job service does.
    """
    if pipeline_options.view_as(StandardOptions).runner != DEFAULT_RUNNER:
        return None
    # One TensorFlow thread per worker process, as there is one worker per core. A DoFn's setup
    # asks for that too, but only takes effect where nothing has started TF's runtime yet; a worker
    # that had (measured: one of two) ran with default pools, oversubscribing the cores. TF reads
    # these variables when its runtime starts; the workers inherit them.
    # Only for worker processes: in-process modes keep TF's default pools.
    if pipeline_options.view_as(DirectOptions).direct_running_mode == "multi_processing":
        for variable in ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS"):
            os.environ.setdefault(variable, "1")
    from apache_beam.portability.api import beam_provision_api_pb2
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    from apache_beam.runners.portability.portable_runner import JobServiceHandle

    encoded = JobServiceHandle.encode_pipeline_options(
        pipeline_options.get_all_options(retain_unknown_options=True))
    return fn_runner.FnApiRunner(provision_info=fn_runner.ExtendedProvisionInfo(
        beam_provision_api_pb2.ProvisionInfo(retrieval_token="unused-retrieval-token",
                                             pipeline_options=encoded)))


def for_io_bound_work(beam_args: list[str]) -> list[str]:
    """Beam arguments for a pipeline that mostly waits (e.g. on a database): on the local runner,
    worker threads instead of worker processes, which would each start (and import TensorFlow) for
    a few seconds of waiting; other runners are left as they are."""
    if flag_value(beam_args, "runner") != DEFAULT_RUNNER:
        return list(beam_args)
    kept = list(beam_args)
    while "--direct_running_mode" in kept:  # The flag given as two arguments: drop its value too.
        at = kept.index("--direct_running_mode")
        del kept[at:at + 2]
    kept = [arg for arg in kept if not arg.startswith("--direct_running_mode=")]
    return kept + ["--direct_running_mode=multi_threading"]


def quiet_library_logs() -> None:
    """Keeps Beam's relayed worker notices and TFT's advice out of the user's terminal."""
    for name in ("apache_beam.runners.portability", "apache_beam.runners.worker", "absl"):
        logging.getLogger(name).setLevel(logging.ERROR)


def configure_tensorflow_threads() -> None:
    """One TF thread per worker process: Beam already runs one worker per core."""
    import tensorflow as tf

    try:
        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    except RuntimeError:
        pass  # TF already started in this process (in-process runners, tests): keep its pools.
