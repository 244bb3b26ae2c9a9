"""Beam's search of a DoFn for user state and timers, made once per method instead of on every call.

Beam asks `apache_beam.transforms.userstate.get_dofn_specs(dofn)` about every DoFn many times a run: at
ParDo's construction, twice more when the pipeline is turned into its runner form, and twice again for each
bundle processor a worker builds. Each call runs `inspect.signature` on every method of the DoFn (~30: the
base class's as well as its own), 801 calls and ~23,000 signatures in a one-image preprocessing run, most of
them of the same few functions. Measured on this project's machine (CPU seconds, `/usr/bin/time`): a warm
one-image run in memory 4.4 -> 3.3 s, the first run in a fresh process 14.5 -> 10.6 s.

`install()` puts a version in its place that answers the same: it looks at the same methods, raises the same
error for a method that names one parameter twice, and returns the same state and timer specs. What it keeps
is each method's DoFn parameters (`DoFn.StateParam(...)`, `DoFn.TimerParam(...)`, ...), by the method's
function: those are the function's default values, fixed when it was defined. A method that Beam inspects
through the DoFn's own `_inspect_<name>` (Map's, FlatMap's and Filter's `process`: the wrapped callable's
parameters) and anything that is not a plain function are looked at anew every time, as Beam does.

The launcher installs it (`launcher.beam_options`) before a pipeline is built, and each local worker process
(`worker_process`) before Beam's worker starts; both are the processes that build and run our pipelines.
"""

from __future__ import annotations

import types
import weakref
from typing import Any

# A method's function -> the DoFn parameters among its defaults. Weak: a DoFn class made for one run (a
# test's, a notebook's) is not kept alive by it.
_PARAMS: weakref.WeakKeyDictionary[types.FunctionType, tuple[Any, ...]] = weakref.WeakKeyDictionary()
_beams_own: Any = None


def _dofn_params(dofn: Any, name: str, method: types.MethodType) -> tuple[Any, ...]:
    """The DoFn parameters (`core._DoFnParam`) among the defaults of `dofn`'s method `name`, in order."""
    from apache_beam.transforms import core

    function = method.__func__
    # Beam asks the DoFn itself when it has `_inspect_<name>` (the callable a Map wraps): never kept.
    if not isinstance(function, types.FunctionType) or hasattr(dofn, f"_inspect_{name}"):
        return _params_among(core.get_function_arguments(dofn, name)[1])
    if function not in _PARAMS:
        _PARAMS[function] = _params_among(core.get_function_arguments(dofn, name)[1])
    return _PARAMS[function]


def _params_among(defaults: list[Any]) -> tuple[Any, ...]:
    from apache_beam.transforms import core

    return tuple(value for value in defaults if isinstance(value, core._DoFnParam))


def get_dofn_specs(dofn: Any) -> tuple[set[Any], set[Any]]:
    """(state specs, timer specs) of `dofn`: what Beam's own `userstate.get_dofn_specs` returns, and raises."""
    from apache_beam.transforms import core

    state_specs: set[Any] = set()
    timer_specs: set[Any] = set()
    for name in dir(dofn):
        method = getattr(dofn, name, None)
        if not isinstance(method, types.MethodType):
            continue
        params = _dofn_params(dofn, name, method)
        param_ids = [param.param_id for param in params]
        if len(param_ids) != len(set(param_ids)):  # Beam's own message.
            raise ValueError(f"DoFn {dofn!r} has duplicate {name} method parameters: {param_ids}.")
        for param in params:
            if isinstance(param, core._StateDoFnParam):
                state_specs.add(param.state_spec)
            elif isinstance(param, core._TimerDoFnParam):
                timer_specs.add(param.timer_spec)
    return state_specs, timer_specs


def install() -> None:
    """Puts `get_dofn_specs` in the place of Beam's (once a process; Beam's callers look it up there)."""
    global _beams_own
    from apache_beam.transforms import userstate

    if _beams_own is None:
        _beams_own = userstate.get_dofn_specs
        userstate.get_dofn_specs = get_dofn_specs


def beams_own() -> Any:
    """Beam's own `get_dofn_specs` (the tests compare the two)."""
    from apache_beam.transforms import userstate

    return _beams_own or userstate.get_dofn_specs
