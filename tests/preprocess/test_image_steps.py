"""--image_step (issue 51, first slice): TF steps through the job, per-row step failures, up-front refusals,
identity in the manifest and on rerun, and the serving export applying the same steps.

One small job (6 rows, 8 px, raw storage) is made once for the module, for the tests marked slow (a whole
run: the full suite); the everyday ones run in process without a pipeline (`RowPreprocessor`, refusals that
stop before any work).
"""

import dataclasses
import json
import os
import textwrap

import keras
import numpy as np
import pytest

import imaging
import in_process
import outputs
from beam_pipeline.inputs import rows as source
from beam_pipeline.preprocess import inspect
from beam_pipeline.preprocess.row_preprocessor import RowPreprocessor
from tf_serving_input import failures, steps
from tf_serving_input.features import PreprocessConfig

SIZE = 8
# A TF step that the job runs first: it raises on a red level of 7, returns an empty image on 9 and a
# one-channel image on 11 (the checks only a run can make), and passes every other image on.
HOSTILE = textwrap.dedent('''\
    import tensorflow as tf


    def hostile(image):
        red = image[0, 0, 0]
        tf.debugging.assert_none_equal(red, tf.constant(7, tf.uint8), message="red level 7 is refused")
        return tf.cond(tf.equal(red, 9), lambda: image[:0],
                       lambda: tf.cond(tf.equal(red, 11), lambda: image[..., :1], lambda: image))


    def invert(image):
        return 255 - image


    def as_float(image):
        return tf.cast(image, tf.float32)


    def as_list(image):
        return None


    def python_only(image):
        return image.numpy()


    def two(image, other):
        return image


    import beam_pipeline


    @beam_pipeline.batch_step
    def reverse_channels(images):  # After the resize, on the whole batch: RGB -> BGR.
        return images[..., ::-1]


    from os.path import join  # Imported, not defined here: not one of the functions a refusal lists.


    class Cropper:
        def __init__(self):
            pass
    ''')


def solid_png(red, green=20, blue=30):
    return imaging.encode(imaging.solid((red, green, blue), 12, 10), "PNG")


@pytest.fixture(scope="module")
def stepped(tmp_path_factory):
    """The job run with `hostile`, `invert` then the batch step `reverse_channels`: (output_dir, folder, steps
    file, result)."""
    folder = tmp_path_factory.mktemp("steps")
    steps_file = folder / "my_steps.py"
    steps_file.write_text(HOSTILE)
    files = {"plain.png": solid_png(10), "raises.png": solid_png(7), "empty.png": solid_png(9),
             "one_channel.png": solid_png(11), "photo.jpg": imaging.encode(imaging.quadrants(20, 24), "JPEG"),
             "text.png": b"not an image at all"}
    for name, data in files.items():
        (folder / name).write_bytes(data)
    imaging.write_csv(folder / "in.csv", ["path", "label"], [[name, "a"] for name in files])
    out = folder / "out"
    result = in_process.run_module(
        "beam_pipeline", "--input_csv", folder / "in.csv", "--output_dir", out, "--image_size", SIZE,
        "--no_progress", "--max_error_rate", "1", "--image_step", f"{steps_file}:hostile",
        "--image_step", f"{steps_file}:invert", "--image_step", f"{steps_file}:reverse_channels")
    return out, folder, steps_file, result


@pytest.mark.slow  # A whole job run (the module's `stepped`): the full suite's, not the everyday lane.
def test_tf_steps_run_in_the_job_in_order_and_fail_only_their_rows(stepped):
    out, _, steps_file, result = stepped
    assert result.returncode == 0, result.stderr
    stored = {example["image/source"].decode(): example["pixels"] for example in outputs.all_examples(out)}
    assert sorted(stored) == ["photo.jpg", "plain.png"]
    # A flat image stays flat through the resize: the stored pixels are the inverted colour, channels reversed.
    assert (stored["plain.png"] == [225, 235, 245]).all()
    manifest = outputs.manifest(out)
    by_source = {failure["source"]: failure for failure in outputs.errors(out)}
    assert by_source["raises.png"]["reason"] == failures.STEP_FAILED
    assert by_source["raises.png"]["detail"].startswith("hostile: InvalidArgumentError: ")
    assert "red level 7 is refused" in by_source["raises.png"]["detail"]
    assert by_source["empty.png"]["reason"] == failures.STEP_BAD_OUTPUT
    assert "hostile returned uint8 of shape [0 10 3]" in by_source["empty.png"]["detail"]
    assert by_source["one_channel.png"]["reason"] == failures.STEP_BAD_OUTPUT
    assert "[12 10 1]" in by_source["one_channel.png"]["detail"]
    assert by_source["text.png"]["reason"] == failures.NOT_AN_IMAGE
    report = inspect.format_report(manifest)
    assert f"image step 1: {steps_file}:hostile (tf, SHA-256 " in report
    assert f"image step 2: {steps_file}:invert (tf, SHA-256 " in report
    assert f"image step 3: {steps_file}:reverse_channels (batch, SHA-256 " in report
    recorded = manifest["config"]["image_steps"]
    digest = steps._file_digest(str(steps_file))
    assert recorded == [{"spec": f"{steps_file}:hostile", "kind": "tf", "position": 0, "sha256": digest},
                        {"spec": f"{steps_file}:invert", "kind": "tf", "position": 1, "sha256": digest},
                        {"spec": f"{steps_file}:reverse_channels", "kind": "batch", "position": 2, "sha256": digest}]


@pytest.mark.slow  # A whole job run (the module's `stepped`): the full suite's, not the everyday lane.
def test_export_serves_raw_bytes_through_the_same_steps(stepped, tmp_path):
    """Train/serve parity: serving_default on the raw file equals the model on the stored (stepped) record."""
    import tensorflow as tf

    import serving_loaders
    from tf_serving_input import export_serving_model

    out, folder, _, _ = stepped
    model = keras.Sequential([keras.Input((SIZE, SIZE, 3)), keras.layers.Flatten()])
    export_dir = export_serving_model(model, str(out), str(tmp_path / "export"), embedding_layer=False)
    records = {}
    for path in outputs.shard_paths(out):
        for record in tf.data.TFRecordDataset(path):
            source_name = tf.train.Example.FromString(record.numpy()).features.feature["image/source"]
            records[source_name.bytes_list.value[0].decode()] = record.numpy()
    names = ["plain.png", "photo.jpg"]
    by_record = serving_loaders.load_signature(export_dir, "serving_examples", "tf2")(
        examples=[records[name] for name in names])["scores"]
    for loader in serving_loaders.LOADERS:  # TF2's loader and the session loader TF Serving uses.
        signature = serving_loaders.load_signature(export_dir, "serving_default", loader)
        by_bytes = signature(image_bytes=[(folder / name).read_bytes() for name in names])["scores"]
        signature.close()
        assert np.abs(np.asarray(by_bytes) - np.asarray(by_record)).max() == 0, loader
    serve = serving_loaders.load_signature(export_dir, "serving_default", "tf2")
    with pytest.raises(tf.errors.InvalidArgumentError, match="step_bad_output"):
        serve(image_bytes=[(folder / "empty.png").read_bytes()])
    info = json.loads((tmp_path / "export" / "assets.extra" / "beam_image_pipeline.json").read_text())
    assert [step["spec"].rpartition(":")[2] for step in info["image_steps"]] == ["hostile", "invert",
                                                                                "reverse_channels"]


@pytest.mark.slow  # A whole job run (the module's `stepped`): the full suite's, not the everyday lane.
def test_a_changed_step_is_refused_on_rerun_and_at_export_unless_overwrite(stepped, tmp_path):
    from tf_serving_input import export_serving_model

    out, folder, steps_file, _ = stepped
    original = steps_file.read_text()
    try:
        steps_file.write_text(original.replace("255 - image", "254 - image"))
        again = in_process.run_module(
            "beam_pipeline", "--input_csv", folder / "in.csv", "--output_dir", out, "--image_size", SIZE,
            "--no_progress", "--max_error_rate", "1", "--image_step", f"{steps_file}:hostile",
            "--image_step", f"{steps_file}:invert", "--image_step", f"{steps_file}:reverse_channels")
        assert again.returncode == 2, again.stderr
        [line] = [line for line in again.stderr.splitlines() if line.startswith("error:")]
        assert "different input or configuration" in line and "--overwrite" in line
        assert "it differs in config.image_steps" in line  # Says what changed: the step (hostile trial).
        model = keras.Sequential([keras.Input((SIZE, SIZE, 3)), keras.layers.Flatten()])
        with pytest.raises(steps.StepRefused, match="changed since the run was made"):
            export_serving_model(model, str(out), str(tmp_path / "export"), embedding_layer=False)
    finally:
        steps_file.write_text(original)


def refusal(tmp_path, spec):
    """The job refused up front for `spec`: its one error line; nothing written to the output folder."""
    (tmp_path / "a.png").write_bytes(solid_png(10))
    imaging.write_csv(tmp_path / "in.csv", ["path", "label"], [["a.png", "a"]])
    result = in_process.run_module("beam_pipeline", "--input_csv", tmp_path / "in.csv", "--output_dir",
                                   tmp_path / "out", "--no_progress", "--image_step", spec)
    assert result.returncode == 2, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and errors[0].startswith(f"error: --image_step {spec}: "), result.stderr
    assert not (tmp_path / "out").exists()
    return errors[0]


@pytest.mark.parametrize("source, function, expected", [
    (None, "invert", "no such file"),
    ("def broken(image):\n    return image +\n", "broken", ":2: syntax error"),
    ("import no_such_module_here\n", "invert", ":1: importing it failed: ModuleNotFoundError"),
    (HOSTILE, "missing", "no function 'missing' (functions there: as_float, as_list, hostile, invert, "),
    (HOSTILE, "two", ":27: two takes 2 parameters; a step takes 1: the image"),
    (HOSTILE, "Cropper", ": Cropper is a class, not a function: name a function (of the image)"),
    (HOSTILE, "python_only", ":23: python_only cannot be traced as a TF step (AttributeError: "),
    # What its trace shows cannot be an image (the hostile trial: every row failed instead).
    (HOSTILE, "as_float", ":15: as_float returns float32 of shape (None, None, 3); a TF step returns uint8 [h, w, 3]"),
])
def test_a_step_that_cannot_work_is_refused_before_any_work(tmp_path, source, function, expected):
    steps_file = tmp_path / "user_steps.py"
    if source is not None:
        steps_file.write_text(source)
    line = refusal(tmp_path, f"{steps_file}:{function}")
    assert f"{steps_file}" in line and expected in line, line
    assert "join" not in line  # The module's own functions only.
    if function == "python_only":
        assert line.endswith(steps.PYTHON_HINT)


def test_a_missing_module_is_refused(tmp_path):
    assert "no_such_package_here.steps: no such module" in refusal(tmp_path, "no_such_package_here.steps:fn")


def rows_of(tmp_path, files):
    result = []
    for index, (name, data) in enumerate(files):
        (tmp_path / name).write_bytes(data)
        result.append(source.Row(index=index, line=index + 2, source=name, path=str(tmp_path / name), label="a",
                                 split="train", key=source.row_key(index, name)))
    return result


def test_a_step_whose_output_is_never_an_image_fails_every_row(tmp_path):
    """An output whose rank only running it shows (a py_function's: its trace cannot tell): every row fails."""
    steps_file = tmp_path / "user_steps.py"
    steps_file.write_text(HOSTILE + textwrap.dedent('''


        def gray_at_run(image):
            return tf.py_function(lambda x: x[..., 0], [image], Tout=tf.uint8)
    '''))
    record, _ = steps.resolve(f"{steps_file}:gray_at_run", 0)
    preprocessor = RowPreprocessor(PreprocessConfig(image_size=SIZE), steps=(record,))
    outcomes = list(preprocessor(rows_of(tmp_path, [("a.png", solid_png(10)), ("b.png", solid_png(12))])))
    detail = "gray_at_run returned uint8 of shape [12 10]; a step returns uint8 [h >= 1, w >= 1, 3]"
    assert [outcome for _, outcome in outcomes] == [failures.RowFailure(failures.STEP_BAD_OUTPUT, detail)] * 2


def test_a_step_returning_no_array_is_a_bad_output():
    import tensorflow as tf

    image, bad, detail = steps.run_tf_steps(tf.zeros([4, 5, 3], tf.uint8), [("nothing", lambda image: None)])
    assert bool(bad) and detail.numpy() == b"nothing returned NoneType, not an image" and image.shape == (1, 1, 3)


def test_the_documented_example_step_traces():
    record, _ = steps.resolve("sample_data/steps/gray_world.py:gray_world", 0, cwd=outputs.REPO_ROOT)
    assert record.kind == steps.TF and record.spec.endswith("sample_data/steps/gray_world.py:gray_world")


# NumPy only: a Python step's module is imported again in each step process (TensorFlow would cost seconds).
PYTHON_STEPS = textwrap.dedent('''\
    import numpy as np

    from beam_pipeline import python_step

    SET_UPS = []


    def make_offset():
        SET_UPS.append(1)
        import os
        with open(os.path.join(os.path.dirname(__file__), f"set_up_in_{os.getpid()}"), "w"):
            pass  # Which process set it up: the test reads the names.
        return 5


    @python_step(setup=make_offset)
    def brighten(image, offset):
        red = int(image[0, 0, 0])
        if red == 7:
            raise ValueError("red level 7\\nis refused")
        if red == 9:
            return image.astype(np.float64)
        if red == 11:
            return image[:0]
        if red == 13:
            return [1, 2, 3]
        return image + np.uint8(offset)
    ''')
# The rows of a Python step's tests: (name, bytes) and what each becomes.
PYTHON_ROWS = [("plain.png", solid_png(10)), ("raises.png", solid_png(7)), ("float.png", solid_png(9)),
               ("empty.png", solid_png(11)), ("list.png", solid_png(13)), ("text.png", b"no image here")]
PYTHON_FAILURES = {
    "raises.png": failures.RowFailure(failures.STEP_FAILED, "brighten: ValueError: red level 7"),
    "float.png": failures.RowFailure(failures.STEP_BAD_OUTPUT, "brighten returned a float64 array of shape "
                                     "[12, 10, 3]; a step returns uint8 [h, w, 3]"),
    "empty.png": failures.RowFailure(failures.STEP_BAD_OUTPUT, "brighten returned a uint8 array of shape "
                                     "[0, 10, 3]; a step returns uint8 [h, w, 3]"),
    "list.png": failures.RowFailure(failures.STEP_BAD_OUTPUT, "brighten returned list, not a NumPy array"),
}


@pytest.mark.slow  # Step processes started, TensorFlow traced twice (~8 s): tests/preprocess/test_step_runtime.py
# keeps a Python step's own process in the everyday lane.
def test_a_python_step_runs_between_decode_and_resize_once_set_up(tmp_path):
    """decode -> Python step (set up once per step process) -> TF step -> resize, each row failing on its own;
    in a child process by default, in this one with --step_timeout 0."""
    from tf_serving_input.codecs import parse_record

    (tmp_path / "py_steps.py").write_text(PYTHON_STEPS)
    (tmp_path / "tf_steps.py").write_text(HOSTILE)
    records = tuple(steps.resolve(spec, position)[0] for position, spec in
                    enumerate([f"{tmp_path / 'py_steps.py'}:brighten", f"{tmp_path / 'tf_steps.py'}:invert"]))
    assert [record.kind for record in records] == [steps.PYTHON, steps.TF]
    config = PreprocessConfig(image_size=SIZE)
    rows = rows_of(tmp_path, PYTHON_ROWS)
    for step_timeout in (None, 0):
        preprocessor = RowPreprocessor(config, steps=records, step_timeout=step_timeout)
        outcomes = dict((row.source, outcome) for row, outcome in preprocessor(rows))
        preprocessor.close()
        image, _ = parse_record(outcomes.pop("plain.png").record, config)
        assert (image.numpy() == [255 - 15, 255 - 25, 255 - 35]).all()  # Brightened by the set-up's 5, inverted.
        assert outcomes.pop("text.png").reason == failures.NOT_AN_IMAGE
        assert outcomes == {name: failure for name, failure in PYTHON_FAILURES.items()}
        set_up_in = {int(path.name.rpartition("_")[2]) for path in tmp_path.glob("set_up_in_*")}
        if step_timeout is None:  # Set up once, in the step process: not in this one.
            assert len(set_up_in) == 1 and os.getpid() not in set_up_in
            assert steps.load(records[0]).__globals__["SET_UPS"] == []
    assert os.getpid() in set_up_in  # --step_timeout 0: in this process, once, even for a second preprocessor.
    RowPreprocessor(config, steps=records, step_timeout=0)
    assert steps.load(records[0]).__globals__["SET_UPS"] == [1]


@pytest.mark.slow  # A whole job run in worker processes: the full suite's, not the everyday lane.
def test_a_python_step_through_the_job_in_worker_processes_and_its_export_refused(tmp_path):
    from tf_serving_input import export_serving_model

    steps_file = tmp_path / "py_steps.py"
    steps_file.write_text(PYTHON_STEPS)
    for name, data in PYTHON_ROWS:
        (tmp_path / name).write_bytes(data)
    imaging.write_csv(tmp_path / "in.csv", ["path", "label"], [[name, "a"] for name, _ in PYTHON_ROWS])
    out = tmp_path / "out"
    result = in_process.run_module(
        "beam_pipeline", "--input_csv", tmp_path / "in.csv", "--output_dir", out, "--image_size", SIZE,
        "--no_progress", "--max_error_rate", "1", "--image_step", f"{steps_file}:brighten",
        # One worker process is a process of its own (what is tested); a second imported TensorFlow again (~10 s).
        "--direct_num_workers", "1", "--direct_running_mode", "multi_processing")
    assert result.returncode == 0, result.stderr
    set_up_in = {int(path.name.rpartition("_")[2]) for path in tmp_path.glob("set_up_in_*")}
    assert set_up_in and os.getpid() not in set_up_in  # In Beam's worker processes, not the launcher's.
    [example] = outputs.all_examples(out)
    assert (example["pixels"] == [15, 25, 35]).all()
    assert {failure["source"]: failure["reason"] for failure in outputs.errors(out)} == {
        **{name: failure.reason for name, failure in PYTHON_FAILURES.items()}, "text.png": failures.NOT_AN_IMAGE}
    assert outputs.manifest(out)["config"]["image_steps"][0]["kind"] == "python"
    model = keras.Sequential([keras.Input((SIZE, SIZE, 3)), keras.layers.Flatten(), keras.layers.Dense(2)])
    with pytest.raises(ValueError, match=r"brighten, is a Python step .*rewrite it in TF ops.*serving_examples"):
        export_serving_model(model, str(out), str(tmp_path / "refused"))

    # The way out: signatures on images after the steps, and no serving_default that would skip them. A query
    # image then goes through the step only when its user names it, and embeds as the stored record does.
    import tensorflow as tf

    from beam_pipeline.common.embeddings import l2_normalize
    from beam_pipeline.common.query_embedding import QueryEmbedder, StepsNeeded

    export = export_serving_model(model, str(out), str(tmp_path / "export"), images_after_steps=True)
    signatures = tf.saved_model.load(export).signatures
    assert sorted(signatures) == ["serving_default", "serving_examples", "serving_images"]
    # TF Serving needs a serving_default: it is serving_images, never raw bytes that would skip the step.
    assert list(signatures["serving_default"].structured_input_signature[1]) == ["images"]
    with pytest.raises(StepsNeeded, match=r"step 1, .*py_steps.py:brighten, is a Python step.*--image_step"):
        QueryEmbedder(export)
    [record] = [bytes(r.numpy()) for r in tf.data.TFRecordDataset(sorted(map(str, out.glob("data/*.tfrecord*"))))]
    stored = l2_normalize(signatures["serving_examples"](examples=tf.constant([record]))["embedding"].numpy())[0]
    query = QueryEmbedder(export, [f"{steps_file}:brighten"]).embed(solid_png(10))
    np.testing.assert_array_equal(query, stored)
    # Raw images cannot go through that export: predict --input_csv is refused in one line, naming the step.
    raw = in_process.predict("--model_dir", export, "--input_csv", tmp_path / "in.csv", "--output_dir",
                             tmp_path / "pred", "--database", "none", "--no_progress")
    assert raw.returncode == 2 and "py_steps.py:brighten, is a Python step" in raw.stderr, raw.stderr[-2000:]


@pytest.mark.slow  # A Python step's process started, TF steps traced (~9 s of the everyday lane): the full suite's.
def test_a_step_file_travels_with_the_job_and_a_worker_never_reads_its_path(tmp_path):
    """A remote worker (a Flink TaskManager's, Dataflow's) has no copy of the launcher's step file: the records
    the job pickles into its DoFns carry the file's bytes, and a worker runs the steps from those."""
    import inspect as inspect_module
    import linecache
    import pickle
    import sys

    steps_file = tmp_path / "py_steps.py"
    # A TF step with a Python `if` too: AutoGraph converts it from its source, which the worker has only as bytes.
    steps_file.write_text(PYTHON_STEPS + textwrap.dedent('''
        import tensorflow as tf


        def invert(image):
            return 255 - image


        def halve_if_bright(image):
            if tf.reduce_min(image) > 250:
                return image // 2
            return image
        '''))
    records = tuple(steps.resolve(f"{steps_file}:{name}", position)[0]
                    for position, name in enumerate(["brighten", "invert", "halve_if_bright"]))
    shipped = pickle.dumps(records)  # As Beam ships the DoFn that holds them.
    steps_file.unlink()  # The worker's machine: no such file ...
    sys.modules.pop(f"beam_image_pipeline_step_{records[0].sha256[:16]}")  # ... and a fresh process.
    steps._SET_UP.clear()
    linecache.clearcache()
    config = PreprocessConfig(image_size=SIZE)
    arrived = pickle.loads(shipped)
    # AutoGraph reads a TF step's source back (inspect, linecache) to convert its `if`: from the carried bytes.
    assert "if tf.reduce_min(image) > 250:" in inspect_module.getsource(steps.load(arrived[2]))
    [(_, outcome)] = RowPreprocessor(config, steps=arrived)(rows_of(tmp_path, PYTHON_ROWS[:1]))
    from tf_serving_input.codecs import parse_record

    assert (parse_record(outcome.record, config)[0].numpy() == [255 - 15, 255 - 25, 255 - 35]).all()
    # What the manifest records (and the run's fingerprint compares) holds no bytes: the SHA-256 stands for them.
    assert "source" not in records[0].to_dict() and steps.StepRecord.from_dict(records[0].to_dict()) == records[0]
    tampered = pickle.loads(shipped.replace(b"make_offset", b"make_offsex"))
    with pytest.raises(steps.StepRefused, match=r"py_steps.py: step .*:brighten: the bytes it carries are not the "
                                                r"recorded source"):
        steps.load(tampered[0])


BATCH_STEPS = textwrap.dedent('''\
    import tensorflow as tf

    from beam_pipeline import batch_step, python_step


    @batch_step
    def halve_red(images):  # Raises for a batch holding the colour (200, 20, 30) (after the resize).
        refused = tf.reduce_all(tf.equal(images[:, 0, 0], tf.constant([200, 20, 30], tf.uint8)), axis=-1)
        tf.debugging.Assert(tf.logical_not(tf.reduce_any(refused)), ["red 200 refused"])
        return tf.concat([images[..., :1] // 2, images[..., 1:]], axis=-1)


    @batch_step
    def drop_one(images):
        return images[1:]


    @batch_step
    def gray(images):
        return tf.cast(images, tf.float32)


    @python_step
    def as_is(image):
        return image
    ''')


@pytest.mark.slow  # Three preprocessors traced anew (41 s of a loaded everyday lane): the full suite's.
def test_a_batch_step_runs_on_the_resized_batch_and_fails_only_its_rows(tmp_path):
    """Stored = step(resized): the job's call with the batch step against the same rows without it."""
    from tf_serving_input.codecs import parse_record

    steps_file = tmp_path / "batch_steps.py"
    steps_file.write_text(BATCH_STEPS)
    halve, _ = steps.resolve(f"{steps_file}:halve_red", 0, image_size=SIZE)
    assert halve.kind == steps.BATCH
    rows = rows_of(tmp_path, [("a.jpg", imaging.encode(imaging.quadrants(20, 24), "JPEG")), ("b.png", solid_png(40)),
                              ("red.png", solid_png(200)), ("text.png", b"no image")])
    config = PreprocessConfig(image_size=SIZE, image_format="png")  # Encoded after the batch step.

    def stored(preprocessor):
        return {row.source: parse_record(outcome.record, config)[0].numpy() if hasattr(outcome, "record")
                else outcome for row, outcome in preprocessor(rows)}

    before, after = stored(RowPreprocessor(config)), stored(RowPreprocessor(config, steps=(halve,)))
    for name in ("a.jpg", "b.png"):
        expected = before[name].copy()
        expected[..., 0] //= 2
        assert isinstance(after[name], np.ndarray) and (after[name] == expected).all(), (name, after[name])
    assert after["red.png"].reason == failures.STEP_FAILED and after["red.png"].detail.startswith("halve_red: ")
    assert "red 200 refused" in after["red.png"].detail
    assert after["text.png"].reason == failures.NOT_AN_IMAGE
    # With a Python step (one row at a time), the batch step runs on each resized image as a batch of one.
    as_is, _ = steps.resolve(f"{steps_file}:as_is", 0)
    with_python = stored(RowPreprocessor(config, steps=(as_is, dataclasses.replace(halve, position=1))))
    assert (with_python["b.png"] == after["b.png"]).all() and with_python["red.png"].reason == failures.STEP_FAILED


def test_a_batch_step_that_cannot_work_or_comes_before_a_per_image_step_is_refused(tmp_path):
    steps_file = tmp_path / "batch_steps.py"
    steps_file.write_text(BATCH_STEPS)
    with pytest.raises(steps.StepRefused, match=r"gray returns float32 \(None, 8, 8, 3\); a batch step returns uint8"):
        steps.resolve(f"{steps_file}:gray", 0, image_size=SIZE)
    drop_one, _ = steps.resolve(f"{steps_file}:drop_one", 0, image_size=SIZE)  # Its shape is only known at run time.
    import tensorflow as tf

    with pytest.raises(tf.errors.InvalidArgumentError, match="drop_one returned a batch of another shape"):
        steps.run_batch_steps(tf.zeros([2, SIZE, SIZE, 3], tf.uint8),
                              [("drop_one", steps.trace_batch(steps.load(drop_one), drop_one, SIZE))])
    halve, _ = steps.resolve(f"{steps_file}:halve_red", 0, image_size=SIZE)
    invert, _ = steps.resolve(f"{HOSTILE_FILE(tmp_path)}:invert", 1)
    with pytest.raises(steps.StepRefused, match="cannot follow the batch step .*give the batch steps last"):
        steps.check_order([halve, invert])
    steps.check_order([invert, halve])


def HOSTILE_FILE(tmp_path):  # noqa: N802 - reads as the file it is.
    path = tmp_path / "user_steps.py"
    path.write_text(HOSTILE)
    return path


@pytest.mark.slow  # Traces the job's graph twice, with and without the steps: the full suite's.
def test_preview_runs_the_steps_on_the_first_rows_and_writes_no_run(tmp_path, capsys):
    """--preview N: before/after sheet, each step's time, failures with the job's reasons; no output folder."""
    from PIL import Image

    from beam_pipeline.preprocess import options
    from beam_pipeline.preprocess.preview import run_preview

    steps_file = HOSTILE_FILE(tmp_path)
    # No row that raises: that row's call is redone one row at a time, tracing more (covered by the job's tests).
    files = [("plain.png", solid_png(10)), ("empty.png", solid_png(9)), ("text.png", b"no image"),
             ("not_previewed.png", solid_png(10))]
    for name, data in files:
        (tmp_path / name).write_bytes(data)
    imaging.write_csv(tmp_path / "in.csv", ["path", "label"], [[name, "a"] for name, _ in files])
    job, _ = options.parse_args(["--input_csv", str(tmp_path / "in.csv"), "--output_dir", str(tmp_path / "out"),
                                 "--image_size", str(SIZE), "--image_step", f"{steps_file}:hostile",
                                 "--image_step", f"{steps_file}:invert", "--preview", "3",
                                 "--contact_sheet", str(tmp_path / "sheet.png")])
    assert run_preview(job, job.contact_sheet) == 0
    said = capsys.readouterr().out
    assert not (tmp_path / "out").exists()
    assert "step 1 hostile (tf): " in said and "step 2 invert (tf): " in said and " ms an image (median of " in said
    assert "1 rows written, 2 failed" in said
    assert "empty.png (line 3): step_bad_output: hostile returned uint8 of shape [0 10 3]" in said
    assert "text.png (line 4): not_an_image: " in said and "not_previewed" not in said
    assert Image.open(tmp_path / "sheet.png").size == (2 * (SIZE + 4), 3 * (SIZE + 14 + 4))  # 3 rows, before | after


def test_preview_flags_are_checked():
    from beam_pipeline.preprocess import options

    with pytest.raises(SystemExit):
        options.parse_args(["--input_csv", "a.csv", "--output_dir", "out", "--contact_sheet", "s.png"])
    for preview in ("0", "-3"):  # 0 ran the whole job (hostile trial): a preview of no row is refused.
        with pytest.raises(SystemExit):
            options.parse_args(["--input_csv", "a.csv", "--output_dir", "out", "--preview", preview])
    job, _ = options.parse_args(["--input_csv", "a.csv", "--output_dir", "out", "--preview", "2"])
    assert job.preview == 2 and "preview" not in job.to_dict()  # Not the run's configuration.


def test_the_opencv_example_crops_a_face_and_passes_a_faceless_image_on():
    """sample_data/steps/face_crop.py on two sample photos (skipped without the [opencv] extra)."""
    pytest.importorskip("cv2")
    from PIL import Image

    record, fn = steps.resolve("sample_data/steps/face_crop.py:face_crop", 0, cwd=outputs.REPO_ROOT)
    assert record.kind == steps.PYTHON
    call = steps.python_caller(record, fn)
    images = os.path.join(outputs.REPO_ROOT, "sample_data", "images")
    astronaut = np.asarray(Image.open(os.path.join(images, "astronaut", "astronaut_040.jpg")).convert("RGB"))
    cat = np.asarray(Image.open(os.path.join(images, "cat", "cat_016.jpg")).convert("RGB"))
    face = call(astronaut)
    assert face.dtype == np.uint8 and face.shape[2] == 3 and face.shape[0] * face.shape[1] < astronaut.size // 6
    assert (call(cat) == cat).all()
