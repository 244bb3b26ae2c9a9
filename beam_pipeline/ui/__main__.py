"""`python -m beam_pipeline.ui`: the web UI over a run."""

from beam_pipeline.ui.cli import main

if __name__ == "__main__":
    main()
