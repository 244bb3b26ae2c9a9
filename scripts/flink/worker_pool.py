"""Beam's Python worker pool, listening on one address only: `worker_pool.py --address HOST:PORT`.

The same servicer as `python -m apache_beam.runners.worker.worker_pool_main --service_port=PORT`
(it starts an SDK worker process, `python -c ...SdkHarness...`, for each StartWorker request, with
the `python` first on PATH), but bound to HOST:PORT instead of every address ([::]:PORT).

Why scripts/flink_cluster.sh needs it: each Flink TaskManager must get workers from a pool of its
own. Beam names the pool in the job (`--environment_config=HOST:PORT`, the same for every
TaskManager) and each TaskManager's runner numbers its workers from "1-1" up, while the pool
files its workers by that id: two TaskManagers sharing one pool stop each other's workers (the
job fails with "CANCELLED: client cancelled"). On a real cluster `localhost:50000` is a
different pool on each machine; on one machine the cluster script gives every TaskManager its own
loopback address for the pool's host name (127.0.0.2, 127.0.0.3, ...) and runs this pool there,
all on the same port.
"""

import argparse
import logging
import sys

import grpc
from apache_beam.portability.api import beam_fn_api_pb2_grpc
from apache_beam.runners.worker.worker_pool_main import BeamFnExternalWorkerPoolServicer
from apache_beam.utils import thread_pool_executor


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", required=True, help="HOST:PORT to listen on, e.g. 127.0.0.2:50000")
    args = parser.parse_args(argv)
    # As worker_pool_main's server, but an address already taken is an error, not shared
    # (gRPC sets SO_REUSEPORT by default, which would spread requests over both pools).
    server = grpc.server(thread_pool_executor.shared_unbounded_instance(),
                         options=[("grpc.http2.max_pings_without_data", 0),
                                  ("grpc.http2.max_ping_strikes", 0), ("grpc.so_reuseport", 0)])
    beam_fn_api_pb2_grpc.add_BeamFnExternalWorkerPoolServicer_to_server(
        BeamFnExternalWorkerPoolServicer(use_process=True), server)
    try:
        bound = server.add_insecure_port(args.address)
    except RuntimeError as error:  # newer grpcio raises, older ones return 0
        sys.exit(f"worker pool: cannot listen on {args.address}: {error}")
    if not bound:
        sys.exit(f"worker pool: cannot listen on {args.address}")
    server.start()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    logging.info("Beam worker pool listening on %s", args.address)
    server.wait_for_termination()


if __name__ == "__main__":
    main()
