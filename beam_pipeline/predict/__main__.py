"""Allows `python -m beam_pipeline.predict ...`."""

from beam_pipeline.predict.cli import main

main()
