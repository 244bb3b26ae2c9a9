"""Allows `python -m beam_pipeline.quality ...`."""

from beam_pipeline.quality.cli import main

main()
