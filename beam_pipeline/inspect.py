"""`python -m beam_pipeline.inspect DIR` (the command from before subcommands): `beam-image-pipeline inspect`."""

from beam_pipeline.preprocess.inspect import main, run

__all__ = ["main", "run"]

if __name__ == "__main__":
    main()
