"""A user's own per-image steps (`--image_step SPEC`): the spec, loading it, its identity, running it in TF.

    --image_step my_steps.py:gray_world        # a file and a function in it
    --image_step my_package.my_module:deskew   # an importable module and a function in it

A TF step is a plain function, `fn(image)`: a uint8 tensor [H, W, 3] in, a
uint8 tensor [h, w, 3] out (h, w >= 1). It is traced once with a
[None, None, 3] uint8 signature and runs inside the preprocessing's TF call,
after decode and EXIF orientation and before the resize
(`preprocessing.preprocess_checked_image`), so the job and the serving export
run the very same graph. A function marked `@python_step` is plain Python on
NumPy arrays; it is never traced (it runs in the job's worker processes). A
function marked `@batch_step` is a TF step that runs after the resize, on the
whole batch: uint8 [N, S, S, 3] in, the same shape out (`run_batch_steps`).

Identity: each step is recorded (`StepRecord`: spec, kind, position, the
SHA-256 of its source file). Code is only ever loaded from a spec someone
named: `load` re-reads the recorded file (or module) and refuses it when its
SHA-256 differs from the record. Every refusal is a `StepRefused` whose message
is one line naming the file, the line where it applies and the reason.

Imports no TensorFlow at module level (the job's flags are parsed without it).
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import importlib.abc
import importlib.util
import inspect
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import Any

TF = "tf"
PYTHON = "python"
BATCH = "batch"  # A TF step on the resized batch, [N, S, S, 3] (`@batch_step`).
KINDS = (TF, PYTHON, BATCH)
# The attribute `python_step` sets on a function: its set-up (or None).
_PYTHON_MARK = "__beam_image_pipeline_python_step__"
_BATCH_MARK = "__beam_image_pipeline_batch_step__"  # Set (True) by `batch_step`.
# Hint of a refusal to trace a function that is Python.
PYTHON_HINT = "if it is Python, mark it @python_step (from beam_pipeline import python_step)"
_CUT = 200  # Characters of an error's first line kept in a one-line refusal.


class StepRefused(ValueError):
    """A step spec that cannot work: one line naming the file, the line where it applies and the reason."""


@dataclasses.dataclass(frozen=True)
class PythonStepMark:
    """What `@python_step` records on a function: its optional per-worker set-up."""

    setup: Callable[[], Any] | None = None


def python_step(fn: Callable[..., Any] | None = None, *, setup: Callable[[], Any] | None = None) -> Any:
    """Marks a function as a Python step: NumPy uint8 [H, W, 3] in, NumPy uint8 [h, w, 3] out.

    `@python_step` or `@python_step(setup=make_state)`: with `setup`, it is called
    once per worker process and its result is passed as the step's second
    argument (`fn(image, state)`), like `DoFn.setup` or a Ray actor's `__init__`.
    """
    def mark(function: Callable[..., Any]) -> Callable[..., Any]:
        setattr(function, _PYTHON_MARK, PythonStepMark(setup))
        return function

    return mark(fn) if fn is not None else mark


def batch_step(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Marks a TF function as a batch step: run after the resize, on uint8 [N, S, S, 3], returning that shape.

    It is traced once with a [None, S, S, 3] uint8 signature (S: --image_size) and
    runs in the job's TensorFlow call on each batch of resized images, and in the
    serving export on each request's images. The batch's size is any N >= 1 (the
    job's rows per call, 1 for a row redone on its own, a request's images), so
    each output image must depend on its own input image only.
    """
    setattr(fn, _BATCH_MARK, True)
    return fn


def is_batch_step(fn: Callable[..., Any]) -> bool:
    """Whether `fn` is marked `@batch_step`."""
    return getattr(fn, _BATCH_MARK, False) is True


def python_mark(fn: Callable[..., Any]) -> PythonStepMark | None:
    """The `@python_step` mark of a function, or None for a TF step."""
    mark = getattr(fn, _PYTHON_MARK, None)
    return mark if isinstance(mark, PythonStepMark) else None


@dataclasses.dataclass(frozen=True)
class StepRecord:
    """One step as the manifest and the run's fingerprint record it."""

    spec: str  # FILE.py:FUNCTION with FILE absolute, or package.module:FUNCTION.
    kind: str  # TF, PYTHON or BATCH.
    position: int  # 0 for the first step run.
    sha256: str  # Of the source file's bytes.
    # A file step's bytes, read once when it was named (`resolve`): they travel with the job to every worker,
    # which runs them from here (`load`) and never reads the path: a remote worker (a Flink TaskManager's,
    # Dataflow's) has no such file. Not recorded, not compared: the SHA-256 stands for them.
    source: bytes | None = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def name(self) -> str:
        """The function's name."""
        return self.spec.rpartition(":")[2]

    def to_dict(self) -> dict[str, Any]:
        return {"spec": self.spec, "kind": self.kind, "position": self.position, "sha256": self.sha256}

    @classmethod
    def from_dict(cls, value: dict[str, Any]) -> StepRecord:
        return cls(spec=str(value["spec"]), kind=str(value["kind"]), position=int(value["position"]),
                   sha256=str(value["sha256"]))


def error_line(error: BaseException) -> str:
    """An error's type and first line, escaped (no control characters) and cut: for a one-line message."""
    text = str(error).strip().splitlines()
    line = f"{type(error).__name__}: {text[0] if text else ''}".rstrip(": ")
    line = line.encode("unicode_escape").decode("ascii")  # No control characters in a one-line message.
    return line if len(line) <= _CUT else line[:_CUT - 3] + "..."


def _line_in(error: BaseException, path: str | None) -> int | None:
    """The last line of `path` on the error's traceback (where in the user's file it applies)."""
    if not path:
        return None
    found = None
    for frame in traceback.extract_tb(error.__traceback__):
        if os.path.abspath(frame.filename) == path:
            found = frame.lineno
    return found


def _where(path: str, line: int | None) -> str:
    return f"{path}:{line}" if line else path


def split_spec(text: str, cwd: str | None = None) -> tuple[str | None, str | None, str]:
    """(absolute file path, module name, function) of a spec; one of the first two is None."""
    source, sep, function = text.rpartition(":")
    if not sep or not source or not function or not function.isidentifier():
        raise StepRefused(f"{text}: not a step spec: give FILE.py:FUNCTION or package.module:FUNCTION")
    if source.endswith(".py") or os.sep in source or "/" in source:
        return os.path.abspath(os.path.join(cwd or os.getcwd(), source)), None, function
    if not all(part.isidentifier() for part in source.split(".")):
        raise StepRefused(f"{text}: {source!r} is neither a .py file nor a module name")
    return None, source, function


def _file_digest(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _read_file(path: str) -> bytes:
    if not os.path.isfile(path):
        raise StepRefused(f"{path}: no such file")
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as error:
        raise StepRefused(f"{path}: cannot be read: {error_line(error)}") from None


class _CarriedSource(importlib.abc.Loader):
    """The loader of a step module run from its bytes: its source for whoever reads it back by the file's name
    (linecache, so tracebacks and AutoGraph, which converts a TF step's Python `if`), where no such file is."""

    def __init__(self, source: bytes) -> None:
        self._source = source

    def get_source(self, fullname: str) -> str:
        return self._source.decode("utf-8", "replace")


def _load_file(path: str, source: bytes) -> Any:
    """The module of a step file's `source` (its bytes, read once: what is run is what was hashed)."""
    digest = hashlib.sha256(source).hexdigest()
    # A name of its own per content: two versions of a file never share a module.
    name = f"beam_image_pipeline_step_{digest[:16]}"
    if name in sys.modules:
        return sys.modules[name]
    found = importlib.util.spec_from_loader(name, loader=_CarriedSource(source), origin=path)
    assert found is not None  # Always a spec when a loader is given.
    module = importlib.util.module_from_spec(found)
    module.__file__ = path  # Tracebacks and the step's own lookups name the user's file.
    sys.modules[name] = module  # What pickling and dataclasses in the file look up.
    try:
        exec(compile(source, path, "exec"), module.__dict__)  # noqa: S102 - the user's own step, by design.
    except SyntaxError as error:
        del sys.modules[name]
        raise StepRefused(f"{_where(path, error.lineno)}: syntax error: {error.msg}") from None
    except BaseException as error:  # noqa: BLE001 - any failure of the user's import is a refusal.
        del sys.modules[name]
        raise StepRefused(f"{_where(path, _line_in(error, path))}: importing it failed: {error_line(error)}") \
            from None
    return module


def _load_module(module_name: str) -> tuple[Any, str]:
    try:
        found = importlib.util.find_spec(module_name)
    except (ImportError, ValueError):
        found = None
    if found is None:
        raise StepRefused(f"{module_name}: no such module (not importable from this Python's path)")
    path = os.path.abspath(found.origin) if found.origin and os.path.isfile(found.origin) else None
    try:
        module = importlib.import_module(module_name)
    except SyntaxError as error:
        raise StepRefused(f"{_where(error.filename or module_name, error.lineno)}: syntax error: {error.msg}") \
            from None
    except BaseException as error:  # noqa: BLE001 - any failure of the user's import is a refusal.
        line = _line_in(error, path)
        raise StepRefused(f"{_where(path or module_name, line)}: importing {module_name} failed: "
                          f"{error_line(error)}") from None
    if path is None:
        raise StepRefused(f"{module_name}: has no source file to record (a built-in or namespace module)")
    return module, path


def _function(module: Any, where: str, function: str) -> Callable[..., Any]:
    fn = getattr(module, function, None)
    if inspect.isclass(fn):
        raise StepRefused(f"{where}: {function} is a class, not a function: name a function (of the image) that "
                          "does the step")
    if fn is None or not callable(fn):
        # The module's own functions: what it imports (`from os.path import join`) is not one of its steps.
        defined = sorted(name for name, value in vars(module).items()
                         if inspect.isfunction(value) and not name.startswith("_")
                         and getattr(value, "__module__", None) == module.__name__)
        what = "no function" if fn is None else "not a function:"
        raise StepRefused(f"{where}: {what} {function!r} (functions there: {', '.join(defined) or 'none'})")
    return fn


def _definition_line(fn: Callable[..., Any]) -> int | None:
    code = getattr(inspect.unwrap(fn), "__code__", None)
    return code.co_firstlineno if code is not None else None


def _check_parameters(fn: Callable[..., Any], path: str, function: str) -> None:
    mark = python_mark(fn)
    wanted = 2 if mark is not None and mark.setup is not None else 1
    try:
        inspect.signature(fn).bind(*range(wanted))
    except TypeError:
        count = len(inspect.signature(fn).parameters)
        taking = "the image and the set-up's result" if wanted == 2 else "the image"
        raise StepRefused(f"{_where(path, _definition_line(fn))}: {function} takes {count} parameter"
                          f"{'' if count == 1 else 's'}; a step takes {wanted}: {taking}") from None
    except ValueError:
        pass  # No signature to read (a builtin): it is tried when traced.


def resolve(text: str, position: int, cwd: str | None = None, check_trace: bool = True,
            image_size: int | None = None) -> tuple[StepRecord, Callable[..., Any]]:
    """Loads a spec named on the command line and checks it: (its record, its function).

    TF steps are traced here too (`trace`, `trace_batch` for the side `image_size`, any side when None),
    unless `check_trace` is False. Raises StepRefused (one line).
    """
    path, module_name, function = split_spec(text, cwd)
    source = None
    if path is not None:
        source = _read_file(path)
        module = _load_file(path, source)
        spec, digest = f"{path}:{function}", hashlib.sha256(source).hexdigest()
    else:
        assert module_name is not None
        module, path = _load_module(module_name)
        spec, digest = f"{module_name}:{function}", _file_digest(path)
    fn = _function(module, path, function)
    if python_mark(fn) is not None and is_batch_step(fn):
        raise StepRefused(f"{_where(path, _definition_line(fn))}: {function} is marked both @python_step and "
                          "@batch_step; a batch step is TF ops only")
    _check_parameters(fn, path, function)
    kind = PYTHON if python_mark(fn) else BATCH if is_batch_step(fn) else TF
    record = StepRecord(spec=spec, kind=kind, position=position, sha256=digest, source=source)
    if record.kind == TF and check_trace:
        trace(fn, record)
    if record.kind == BATCH and check_trace:
        trace_batch(fn, record, image_size)
    return record, fn


def check_order(records: Sequence[StepRecord]) -> None:
    """StepRefused when a per-image step comes after a batch step: batch steps run after the resize, last."""
    for before, after in zip(records, records[1:]):
        if before.kind == BATCH and after.kind != BATCH:
            raise StepRefused(f"{after.spec}: a {after.kind} step runs on each image before the resize, so it "
                              f"cannot follow the batch step {before.spec} (batch steps run after the resize): "
                              "give the batch steps last")


def source_path(record: StepRecord) -> str:
    """The file a record's code is read from (a module's file found on this Python's path)."""
    path, module_name, _ = split_spec(record.spec)
    if path is not None:
        return path
    found = importlib.util.find_spec(module_name or "")
    if found is None or not found.origin:
        raise StepRefused(f"{module_name}: no such module (step {record.position + 1}, {record.spec})")
    return os.path.abspath(found.origin)


def load(record: StepRecord) -> Callable[..., Any]:
    """The function of a recorded step, loaded only from the recorded place and only when its SHA-256 matches.

    A record that carries its file's bytes (`resolve`'s, as the job ships it to its workers) is run from
    those, never from the path: a worker on another machine has no such file.
    """
    if record.source is not None:
        return _load_carried(record)
    path = source_path(record)
    try:
        digest = _file_digest(path)
    except OSError as error:
        raise StepRefused(f"{path}: step {record.spec} cannot be read: {error_line(error)}") from None
    if digest != record.sha256:
        raise StepRefused(f"{path}: step {record.spec} changed since the run was made (SHA-256 {digest[:12]}..., "
                          f"recorded {record.sha256[:12]}...): restore it, or rerun the job with --overwrite")
    found, fn = resolve(record.spec, record.position, check_trace=False)  # Its caller traces it.
    if found != record:
        raise StepRefused(f"{path}: step {record.spec} is now a {found.kind} step; the run recorded {record.kind}")
    return fn


def _load_carried(record: StepRecord) -> Callable[..., Any]:
    assert record.source is not None
    path, _, function = split_spec(record.spec)
    digest = hashlib.sha256(record.source).hexdigest()
    if path is None or digest != record.sha256:
        raise StepRefused(f"{path or record.spec}: step {record.spec}: the bytes it carries are not the recorded "
                          f"source (SHA-256 {digest[:12]}..., recorded {record.sha256[:12]}...)")
    fn = _function(_load_file(path, record.source), path, function)
    kind = PYTHON if python_mark(fn) else BATCH if is_batch_step(fn) else TF
    if kind != record.kind:
        raise StepRefused(f"{path}: step {record.spec} is now a {kind} step; the run recorded {record.kind}")
    return fn


def load_named(specs: Sequence[str], recorded: Sequence[StepRecord], where: str,
               cwd: str | None = None) -> list[tuple[StepRecord, Callable[..., Any]]]:
    """A run's recorded steps, each loaded from the spec a user named for it (in order), and only when that file's
    SHA-256 is the recorded one: checked on the bytes before any of them runs.

    For a program that reads a run it did not make (search, the UI): what a run folder names is never
    loaded; `where` names what recorded the steps (one line of StepRefused says what to pass).
    """
    if len(specs) != len(recorded):
        listed = ", ".join(f"{record.spec} ({record.kind})" for record in recorded)
        raise StepRefused(f"{where} was made with {len(recorded)} step(s), {listed}; {len(specs)} --image_step "
                          "given: name each, in order")
    loaded = []
    for spec, record in zip(specs, recorded):
        path, module_name, function = split_spec(spec, cwd)
        source = _read_file(path) if path is not None else None
        if path is None:
            found = importlib.util.find_spec(module_name or "")  # Finds the file; imports nothing.
            if found is None or not found.origin or not os.path.isfile(found.origin):
                raise StepRefused(f"{module_name}: no such module (not importable from this Python's path)")
            path = os.path.abspath(found.origin)
        digest = hashlib.sha256(source).hexdigest() if source is not None else _file_digest(path)
        if function != record.name or digest != record.sha256:
            raise StepRefused(f"--image_step {spec} is not step {record.position + 1} of {where}, {record.spec} "
                              f"(SHA-256 {digest[:12]}..., recorded {record.sha256[:12]}...): name that file and "
                              "function, unchanged")
        fn = (_function(_load_file(path, source), path, function) if source is not None
              else load(dataclasses.replace(record, spec=f"{module_name}:{function}")))
        if (PYTHON if python_mark(fn) else BATCH if is_batch_step(fn) else TF) != record.kind:
            raise StepRefused(f"{path}: {function} is not the {record.kind} step {where} recorded")
        loaded.append((record, fn))
    return loaded


# Each Python step's set-up result, made once per worker process: {(spec, sha256): result}.
_SET_UP: dict[tuple[str, str], Any] = {}


def python_caller(record: StepRecord, fn: Callable[..., Any]) -> Callable[[Any], Any]:
    """`fn(image)`, or `fn(image, state)` with its set-up's result, run once per process (here, now)."""
    mark = python_mark(fn)
    if mark is None or mark.setup is None:
        return fn
    key = (record.spec, record.sha256)
    if key not in _SET_UP:
        try:
            _SET_UP[key] = mark.setup()
        except Exception as error:
            raise RuntimeError(f"the set-up of step {record.spec} failed: {error_line(error)}") from error
    state = _SET_UP[key]
    return lambda image: fn(image, state)


def python_output_problem(name: str, out: Any, max_pixels: int | None = None) -> str | None:
    """What is wrong with a Python step's output (a step_bad_output detail), or None for a uint8 [h, w, 3] array
    of at most `max_pixels` pixels (the job's --max_pixels: a step's output is bounded as a decoded input is, or
    a step that upsamples would take the worker's memory in the resize)."""
    import numpy as np

    if not isinstance(out, np.ndarray):
        return f"{name} returned {type(out).__name__}, not a NumPy array"
    if out.dtype != np.uint8 or out.ndim != 3 or out.shape[2] != 3 or out.shape[0] < 1 or out.shape[1] < 1:
        return f"{name} returned a {out.dtype} array of shape {list(out.shape)}; a step returns uint8 [h, w, 3]"
    if max_pixels is not None and out.shape[0] * out.shape[1] > max_pixels:
        return (f"{name} returned a {out.shape[1]}x{out.shape[0]} image: {out.shape[0] * out.shape[1]} pixels, more "
                f"than --max_pixels {max_pixels}")
    return None


def records_of(config: dict[str, Any]) -> list[StepRecord]:
    """The steps a job's recorded configuration (the manifest's `config`) holds, in order."""
    return [StepRecord.from_dict(value) for value in config.get("image_steps", ())]


def trace(fn: Callable[..., Any], record: StepRecord) -> Any:
    """`fn` as a tf.function traced once for uint8 [None, None, 3]; StepRefused when it cannot be traced."""
    import tensorflow as tf

    traced = tf.function(fn, input_signature=[tf.TensorSpec([None, None, 3], tf.uint8, name="image")])
    path = source_path(record)
    try:
        out = traced.get_concrete_function().structured_outputs
    except Exception as error:  # noqa: BLE001 - any failure to trace is the refusal.
        line = _line_in(error, path) or _definition_line(fn)
        raise StepRefused(f"{_where(path, line)}: {record.name} cannot be traced as a TF step "
                          f"({error_line(error)}); {PYTHON_HINT}") from None
    # What the trace already shows cannot be an image fails every row: refused now, not row by row (a float
    # output, another rank or channel count). What only the data shows (an empty image) stays a row's failure.
    if isinstance(out, tf.Tensor):
        shape = out.shape
        wrong = out.dtype != tf.uint8 or (shape.rank is not None and (
            shape.rank != 3 or shape[-1] not in (None, 3)))
        if wrong:
            raise StepRefused(f"{_where(path, _definition_line(fn))}: {record.name} returns {out.dtype.name} of "
                              f"shape {shape}; a TF step returns uint8 [h, w, 3]")
    return traced


def trace_batch(fn: Callable[..., Any], record: StepRecord, image_size: int | None) -> Any:
    """A `@batch_step` as a tf.function traced once for uint8 [None, S, S, 3]; StepRefused when it cannot be
    traced or its output is not uint8 [N, S, S, 3]."""
    import tensorflow as tf

    traced = tf.function(fn, input_signature=[tf.TensorSpec([None, image_size, image_size, 3], tf.uint8,
                                                            name="images")])
    path = source_path(record)
    try:
        concrete = traced.get_concrete_function()
    except Exception as error:  # noqa: BLE001 - any failure to trace is the refusal.
        line = _line_in(error, path) or _definition_line(fn)
        raise StepRefused(f"{_where(path, line)}: {record.name} cannot be traced as a batch step "
                          f"({error_line(error)}); a batch step is TF ops on uint8 [N, S, S, 3]") from None
    out = concrete.structured_outputs
    if not isinstance(out, tf.Tensor) or out.dtype != tf.uint8 or not out.shape.is_compatible_with(
            [None, image_size, image_size, 3]):
        what = f"{out.dtype.name} {out.shape}" if isinstance(out, tf.Tensor) else type(out).__name__
        raise StepRefused(f"{_where(path, _definition_line(fn))}: {record.name} returns {what}; a batch step "
                          f"returns uint8 [N, S, S, 3], the shape it is given (S: --image_size)")
    return traced


def run_batch_steps(images: Any, steps: Sequence[tuple[str, Callable[..., Any]]]) -> Any:
    """Runs traced `@batch_step`s on the resized uint8 [N, S, S, 3] images, in order.

    A step that returns another shape than it was given fails the call (InvalidArgumentError naming the
    step), as a step that raises does: the job then redoes its rows one at a time, each failing
    `step_failed` with the message.
    """
    import tensorflow as tf

    for name, fn in steps:
        out = fn(images)
        with tf.control_dependencies([tf.debugging.assert_equal(
                tf.shape(out), tf.shape(images), message=f"{name} returned a batch of another shape than it was "
                "given; a batch step returns uint8 [N, S, S, 3]")]):
            images = tf.ensure_shape(tf.identity(out), images.shape)
    return images


def tf_step_call(fn: Callable[..., Any], record: StepRecord) -> Any:
    """One TF step as its own call on uint8 [H, W, 3] -> `run_tf_steps`'s (image, bad, detail): for the paths
    that run steps one at a time (a run with a Python step, a query image)."""
    import tensorflow as tf

    traced = trace(fn, record)
    return tf.function(lambda image: run_tf_steps(image, [(record.name, traced)]),
                       input_signature=[tf.TensorSpec([None, None, 3], tf.uint8)],
                       autograph=False).get_concrete_function()


def run_tf_steps(image: Any, steps: Sequence[tuple[str, Callable[..., Any]]]) -> tuple[Any, Any, Any]:
    """Runs traced TF steps on uint8 [H, W, 3]: (uint8 [h, w, 3], bad output (bool), detail (string)).

    A step whose output is not uint8 [h >= 1, w >= 1, 3] gives bad=True, a 1x1
    black image and a detail saying what came back; later steps then do not run.
    """
    import tensorflow as tf

    placeholder = tf.zeros([1, 1, 3], tf.uint8)

    def checked(name: str, fn: Callable[..., Any], image: Any) -> tuple[Any, Any, Any]:
        out = fn(image)
        try:
            out = tf.convert_to_tensor(out)
        except (TypeError, ValueError):
            return placeholder, tf.constant(True), tf.constant(f"{name} returned {type(out).__name__}, not an image")
        shape = out.shape
        if out.dtype != tf.uint8 or (shape.rank is not None and shape.rank != 3) or (
                shape.rank == 3 and shape[2] is not None and shape[2] != 3):
            return placeholder, tf.constant(True), tf.constant(
                f"{name} returned {out.dtype.name} {shape}; a step returns uint8 [h, w, 3]")
        dims = tf.shape(out)
        ok = tf.equal(tf.size(dims), 3)
        ok = tf.logical_and(ok, tf.reduce_all(tf.concat([dims, [1, 1, 1]], 0)[:3] >= [1, 1, 3]))
        ok = tf.logical_and(ok, tf.equal(tf.concat([dims, [0, 0, 0]], 0)[2], 3))
        detail = tf.strings.format(f"{name} returned uint8 of shape {{}}; a step returns uint8 [h >= 1, w >= 1, 3]",
                                   dims)
        image = tf.cond(ok, lambda: tf.reshape(out, [dims[0], dims[1], 3]) if shape.rank == 3 else
                        tf.reshape(out, tf.concat([dims, [1, 1, 1]], 0)[:3]), lambda: placeholder)
        image.set_shape([None, None, 3])
        return image, tf.logical_not(ok), tf.where(ok, "", detail)

    bad, detail = tf.constant(False), tf.constant("")
    for index, (name, fn) in enumerate(steps):
        if index == 0:
            image, bad, detail = checked(name, fn, image)
        else:
            image, bad, detail = tf.cond(bad, lambda image=image, bad=bad, detail=detail: (image, bad, detail),
                                         lambda name=name, fn=fn, image=image: checked(name, fn, image))
            image.set_shape([None, None, 3])
    return image, bad, detail
