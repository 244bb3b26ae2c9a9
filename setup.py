"""The shim Beam's `--setup_file` needs to stage the project for remote workers: everything is in pyproject.toml."""

import setuptools

setuptools.setup()
