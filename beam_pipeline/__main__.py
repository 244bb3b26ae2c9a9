"""Allows `python -m beam_pipeline SUBCOMMAND ...` (and `python -m beam_pipeline --input_csv ...`)."""

from beam_pipeline.cli import main

main()
