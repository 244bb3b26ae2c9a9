"""The quality job: duplicates, cross-split leaks, label conflicts and flagged images of a job output."""
