"""The web UI over a run (issue 23): `beam-image-pipeline ui --input_dir JOB_OUTPUT ...`.

A job in the jobs' layer: it reads the job's, predict's and quality's folders by their layouts and asks
the database through `beam_pipeline.database`; it imports no other job.
"""
