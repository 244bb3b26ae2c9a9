"""Allows `python -m beam_pipeline.database start|stop|status|psql|url`."""

from beam_pipeline.database.server import main

main()
