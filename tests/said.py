"""What a command said on stderr, told apart: the notices every run prints as it goes, and its problems.

Progress, the header of a run and its notices go to stderr (stdout carries results only:
beam_pipeline/common/terminal.py), so "a failure is one line" means one line besides those.
"""

import re

# The lines a run prints on stderr while it goes well (terminal.notice in the launchers and the progress).
NOTICE = re.compile(r"^(progress: |Resuming: |notice: |note: |Nothing to do: |index: |dropped the index |"
                    r"(Reading|Predicting|Measuring) .*(; writing| then finding))")


def problems(stderr):
    """stderr's lines that are not notices (nor blank)."""
    return [line for line in stderr.splitlines() if line.strip() and not NOTICE.match(line)]


def notices(stderr):
    """stderr's notice lines."""
    return [line for line in stderr.splitlines() if NOTICE.match(line)]
