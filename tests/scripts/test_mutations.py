"""scripts/mutations.py's command line: --help answers, and a name that matches no mutation is refused.

Nothing here runs a mutation (that is the script's own job, minutes long)."""

import importlib.util
import os

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def mutations():
    spec = importlib.util.spec_from_file_location("mutations", os.path.join(REPO_ROOT, "scripts", "mutations.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_help_prints_the_usage_and_runs_nothing(capsys):
    with pytest.raises(SystemExit) as exit_:
        mutations().main(["--help"])
    assert exit_.value.code == 0 and "NAME_PREFIX" in capsys.readouterr().out


def test_a_name_no_mutation_has_is_refused_before_any_runs(capsys):
    assert mutations().main(["M99"]) == 2
    assert "M99 names no mutation" in capsys.readouterr().err
