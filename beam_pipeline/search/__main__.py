"""Allows `python -m beam_pipeline.search ...`."""

from beam_pipeline.search.cli import main

main()
