"""Allows `python -m beam_pipeline.preprocess ...`."""

from beam_pipeline.preprocess.cli import main

main()
