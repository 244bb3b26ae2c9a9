# Custom SDK container for Dataflow (and for Flink/Spark with --environment_type=DOCKER): Beam's
# Python 3.11 SDK image with this project and its dependencies (TensorFlow, tensorflow-transform)
# installed, so workers start without installing anything. Build and push, then pass the image:
#   docker build -t REGION-docker.pkg.dev/PROJECT/REPO/beam-image-pipeline:0.1.0 .
#   docker push REGION-docker.pkg.dev/PROJECT/REPO/beam-image-pipeline:0.1.0
#   scripts/run_dataflow.sh ... --sdk_container_image=REGION-docker.pkg.dev/PROJECT/REPO/beam-image-pipeline:0.1.0
# The launching machine must run the same apache-beam version (2.77.0) as the image.
FROM apache/beam_python3.11_sdk:2.77.0

WORKDIR /opt/beam-image-pipeline
COPY pyproject.toml setup.py README.md ./
COPY beam_pipeline ./beam_pipeline
COPY tf_serving_input ./tf_serving_input
# Keep the image's own apache-beam (the worker boot program matches it); add S3 support.
RUN BEAM_VERSION="$(python -c 'import apache_beam; print(apache_beam.__version__)')" \
    && pip install --no-cache-dir ".[aws]" "apache-beam[gcp,aws]==${BEAM_VERSION}" \
    && python -c "import beam_pipeline.cli, beam_pipeline.preprocess.pipeline, beam_pipeline.predict.pipeline, tf_serving_input.serving, tensorflow_transform.beam"
WORKDIR /
# One TensorFlow thread per SDK worker process: Dataflow starts one Python worker process per vCPU,
# and a worker using TF's default pools oversubscribed the cores (measured locally: 4.4-5.6 vs
# 3.2-3.8 ms per image). TF reads these when its runtime starts.
ENV TF_NUM_INTRAOP_THREADS=1 TF_NUM_INTEROP_THREADS=1
# The base image's ENTRYPOINT (/opt/apache/beam/boot) starts the SDK worker: keep it.
