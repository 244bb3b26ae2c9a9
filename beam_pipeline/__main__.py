"""Allows `python -m beam_pipeline ...`."""

from beam_pipeline.main import main

main()
