"""A pytest plugin: each test's CPU seconds as the JUnit property `cpu`, beside pytest's wall `time`.

On the 2-core CI machine a test's wall time depends on what the other pytest-xdist worker (and, in
scripts/test.sh, the scale-out step beside the unit step) does at the same moment; its CPU time does not.
The CI budget is spent in CPU (both cores are ~99 % busy through the unit step), so a pay-down is chosen
by CPU: `scripts/test_times.py` sums this property per file.

Counted from before the test's set-up to the end of its teardown: this process's user and system time plus
that of the child processes it waited for (a command line's subprocess, and the worker processes that
command waited for). Not counted: servers that outlive the test (PostgreSQL, the UI's browser), and
processes killed before being waited for.
"""

import resource

import pytest

_STARTED = "_cpu_time_started"


def cpu_seconds() -> float:
    """User + system seconds of this process and of its waited-for children, so far."""
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    setattr(item, _STARTED, cpu_seconds())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    # The teardown's report is the last one made, after its fixtures are torn down; the JUnit writer reads
    # the property from it (a report copies `item.user_properties` when it is made).
    if call.when == "teardown" and hasattr(item, _STARTED):
        item.user_properties.append(("cpu", f"{cpu_seconds() - getattr(item, _STARTED):.3f}"))
    yield
