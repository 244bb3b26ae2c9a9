"""The benchmark's command without running the benchmark: that every section is run by it and records
its figures, that a run missing one fails, and that the report carries every figure (no timing asserted).

A run of the sections themselves is the benchmark (minutes even at a tiny size: each section runs the
real job, predict job, quality job and UI); `scripts/benchmark.py` checks its own figures at the end
of every run (cli.finish, report.missing_figures), so a section that stops recording one fails there.
"""

import ast
import glob
import os
import re
import subprocess
import sys

import pytest

import outputs

SCRIPTS = os.path.join(outputs.REPO_ROOT, "scripts")
SCRIPT = os.path.join(SCRIPTS, "benchmark.py")
sys.path.insert(0, SCRIPTS)

from benchmarks import cli, data, engines, report, stages, steps, storage  # noqa: E402
from benchmarks.harness import MachineShare, Results  # noqa: E402
from benchmarks.report import README_BEGIN, README_END  # noqa: E402
from benchmarks.targets import PER_IMAGE_SET, SECTION_ALONE, STAGES_TABLE, STORAGE_TABLE, TARGETS  # noqa: E402

SECTIONS = sorted(glob.glob(os.path.join(SCRIPTS, "benchmarks", "*.py")))


def module_tree(path):
    with open(path, encoding="utf-8") as f:
        return ast.parse(f.read(), path)


def recorded_ratio_names(tree):
    """The names in every `something.ratio("name", ...)` call of a module."""
    return {call.args[0].value for call in ast.walk(tree)
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "ratio"
            and call.args and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str)}


def test_the_command_runs_every_section_and_the_sections_record_every_target():
    [main] = [node for node in module_tree(os.path.join(SCRIPTS, "benchmarks", "cli.py")).body
              if isinstance(node, ast.FunctionDef) and node.name == "main"]
    called = {call.func.value.id for call in ast.walk(main) if isinstance(call, ast.Call)
              and isinstance(call.func, ast.Attribute) and call.func.attr == "measure"
              and isinstance(call.func.value, ast.Name)}
    alone = {module.__name__.rpartition(".")[2] for _, module in cli.ALONE.values()}  # `--section NAME` runs them.
    sections, recorded = set(), {}
    for path in SECTIONS:
        tree = module_tree(path)
        name = os.path.basename(path)[:-3]
        if any(isinstance(node, ast.FunctionDef) and node.name == "measure" for node in tree.body):
            sections.add(name)
        for ratio in recorded_ratio_names(tree):
            recorded.setdefault(ratio, []).append(name)
    never_run = sections - called - alone
    assert len(sections) >= 10 and not never_run, f"sections the command never runs: {never_run}"
    # The engines section records its ratios in a loop over its engines (not a literal name per call).
    recorded.update({name: ["engines"] for name in engines.ENGINES.values() if name})
    assert set(SECTION_ALONE) == {name for name, modules in recorded.items() if set(modules) <= alone - called}
    assert set(recorded) == set(TARGETS), (set(TARGETS) ^ set(recorded))  # Each target, and nothing else.
    assert all(len(modules) == 1 for modules in recorded.values()), recorded  # One owner per figure.
    assert {recorded[name][0] for name in PER_IMAGE_SET} == {"job", "reader", "end_to_end"}


def test_every_section_module_imports_and_the_command_explains_itself():
    result = subprocess.run([sys.executable, SCRIPT, "--help"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "--repetitions" in result.stdout and "ratios against baselines" in result.stdout
    assert "--job_only" in result.stdout
    assert "--section {steps,lists,columns,engines}" in result.stdout and "--step_images" in result.stdout


@pytest.fixture
def image_sets(tmp_path):
    """Three made sets of two tiny files each, as data.make_set names them (sizes feed the report's KiB)."""
    sets = []
    for name, size in (("heavy", 110 * 1024), ("light", 45 * 1024), ("large", 700 * 1024)):
        folder = tmp_path / "images" / name
        folder.mkdir(parents=True)
        images = []
        for i in range(2):
            path = folder / f"{i}.jpg"
            path.write_bytes(b"\xff" * size)
            images.append((str(path), "ab"[i]))
        sets.append(data.ImageSet(name, str(folder), images))
    return sets


def every_figure(image_sets):
    """Results as a run records them: every target (on both photo sets where a section measures both),
    the throughput rates, and the sections' tables (storage.format_table for every format, stages')."""
    from tf_serving_input.features import IMAGE_FORMATS  # No TensorFlow import.

    results = Results()
    for number, name in enumerate(TARGETS):
        for images in ([s.title for s in image_sets[:2]] if name in PER_IMAGE_SET else ["224 px records"]):
            results.ratio(name, images, [1.0 + number / 10])
    results.rate("Pillow loop (heavy)", [120.0])
    results.rate("Beam job, marginal (heavy)", [100.0])
    results.tables[STORAGE_TABLE] = storage.format_table(
        [(image_format, 10.0 * (i + 1), 900.0, 0.0, 0.0) for i, image_format in enumerate(IMAGE_FORMATS)])
    results.tables[STAGES_TABLE] = stages.format_table(
        {s.title: {"read": 5000.0, "decode": 300.0, "resize": 800.0} for s in image_sets[:2]})
    return results


def finish(tmp_path, results, image_sets):
    readme = tmp_path / "README.md"  # Beside --docs_dir, as README.md is beside docs/.
    readme.write_text(f"# Project\n\n{README_BEGIN}\nold\n{README_END}\n\nafter\n")
    args = cli.parse_args(["--repetitions", "1", "--workdir", str(tmp_path / "work"),
                           "--docs_dir", str(tmp_path / "docs")], description="")
    os.makedirs(args.docs_dir)
    share = MachineShare()
    cli.finish(results, args, "python scripts/benchmark.py --repetitions 1", 1.0, image_sets,
               share.others_fraction())
    return readme


def test_a_run_carries_every_figure_into_its_table_report_chart_and_readme(tmp_path, capsys, image_sets):
    readme = finish(tmp_path, every_figure(image_sets), image_sets)
    printed = capsys.readouterr().out
    assert set(TARGETS) >= {"job_vs_bare", "job_vs_pillow", "reader_vs_after", "train_reader_vs_no_augment",
                            "train_reader_vs_after", "shrink_speedup", "shrink_psnr", "memory_ratio",
                            "predict_vs_model_predict", "load_vs_bare_copy", "search_p50_ms", "predict_memory_ratio"}
    for name in TARGETS:
        assert f"| {name} |" in printed, name
    for name in ("job_vs_bare", "job_vs_pillow", "reader_vs_after", "end_to_end_10_epochs"):  # On both sets.
        assert f"| {name} | heavy, " in printed and f"| {name} | light, " in printed, name
    report_text = (tmp_path / "docs" / "benchmarks.md").read_text()
    assert "## Ratios against targets" in report_text and "## Where the time goes" in report_text
    assert "| median | min-max |" in report_text
    # Whether other processes ran is the machine's state, not the code's: one of the two sentences, never both
    # (tests/scripts/test_benchmark_harness.py checks which sentence each share gets).
    said = ["Other work shared the machine" in report_text, "Nothing else ran on the machine" in report_text]
    assert said.count(True) == 1, said
    assert "a smoke run, not a measurement" in report_text  # Fewer than 3 repetitions says so.
    for image_format in ("raw", "jpeg", "png"):  # Every storage format is measured.
        assert f"| {image_format} |" in report_text, image_format
    assert (tmp_path / "docs" / "benchmark_throughput.png").read_bytes().startswith(b"\x89PNG")
    text = readme.read_text()
    assert text.startswith(f"# Project\n\n{README_BEGIN}\n") and text.endswith(f"{README_END}\n\nafter\n")
    assert "old" not in text and "| `search_recall_at_10` |" in text


@pytest.mark.parametrize("dropped", ["search_recall_at_10", "job_vs_pillow [light", "the table 'Storage formats'"])
def test_a_run_missing_a_figure_fails_naming_it_and_writes_no_report(tmp_path, image_sets, dropped):
    results = every_figure(image_sets)
    if dropped.startswith("the table"):
        del results.tables[STORAGE_TABLE]
    name, _, images = dropped.partition(" [")
    results.ratios = [r for r in results.ratios if not (r.name == name and r.images.startswith(images))]
    with pytest.raises(RuntimeError, match=f"did not measure: {re.escape(dropped)}"):
        finish(tmp_path, results, image_sets)
    assert not (tmp_path / "docs" / "benchmarks.md").exists()
    assert "old" in (tmp_path / "README.md").read_text()


def test_a_full_run_does_not_miss_the_figures_only_a_section_alone_measures(image_sets):
    results = every_figure(image_sets)
    results.ratios = [r for r in results.ratios if r.name not in SECTION_ALONE]
    assert SECTION_ALONE and report.missing_figures(results, [s.title for s in image_sets[:2]]) == []


def test_a_figure_without_a_target_entry_fails_when_recorded_not_at_the_report():
    with pytest.raises(KeyError, match="not in benchmarks/targets.py TARGETS"):
        Results().ratio("job_vs_pilow", "heavy", [1.0])


@pytest.mark.slow  # 2 GiB held and a subprocess (3-6 s): the full suite's, not the everyday lane's.
def test_the_pair_findings_peak_memory_is_its_own_not_its_launchers(tmp_path):
    """ru_maxrss after exec includes the launching process's peak: under the benchmark (a few GiB) every
    pair-finding run read 3.16 GiB at a million hashes, while it peaks at 1.6 GiB alone."""
    import json

    held = bytearray(2 * 2**30)
    held[::4096] = b"\1" * len(held[::4096])  # Resident: this process's peak when the stage starts.
    out = subprocess.run([sys.executable, "-m", "benchmarks.quality", "--hashes", "10000", "--workdir",
                          str(tmp_path)], capture_output=True, text=True, check=True, cwd=SCRIPTS,
                         env=dict(os.environ, PYTHONPATH=os.pathsep.join([outputs.REPO_ROOT, SCRIPTS])))
    del held
    assert json.loads(out.stdout.strip().splitlines()[-1])["peak_rss_bytes"] < 2**30



def test_the_steps_sections_steps_load_as_the_job_loads_them_and_return_new_images():
    """Section 9's steps (no timing asserted): G and R load as Python steps and the trivial one as a TF step,
    through the job's loader; G and R return a new uint8 image of their read-only input's shape."""
    import numpy as np

    import imaging
    from tf_serving_input import steps as image_steps

    kinds = {function: image_steps.resolve(steps.spec(function), 0, check_trace=False)[0].kind
             for function in ("gil_equalize", "numpy_blur", steps.TF_STEP)}
    assert kinds == {"gil_equalize": "python", "numpy_blur": "python", steps.TF_STEP: "tf"}
    image = imaging.photo_like(np.random.default_rng(5), 30, 40)
    image.flags.writeable = False  # As the job passes it.
    for key, (_, function, _) in steps.PYTHON_STEPS.items():
        out = steps.load_step(function)(image)
        assert out.dtype == np.uint8 and out.shape == image.shape and not np.array_equal(out, image), key


@pytest.mark.slow  # 3-4 s of tracing and tf.data on an idle 2-core machine (6-9 s under load): the full suite's.
def test_the_steps_sections_loop_and_py_function_pipeline_run_its_steps_over_files(tmp_path):
    """Section 9's baselines on 3 small JPEGs (no timing asserted; its job runs are the benchmark's): the
    sequential loop (the job's decode and resize functions) and 'after' with tf.py_function run the steps."""
    import numpy as np

    import imaging
    from tf_serving_input.features import PreprocessConfig

    rng = np.random.default_rng(5)
    paths = []
    for i in range(3):
        paths.append(str(tmp_path / f"{i}.jpg"))
        with open(paths[-1], "wb") as f:
            f.write(imaging.encode(imaging.photo_like(rng, 60 + 8 * i, 80), "JPEG"))
    csv_path = data.write_csv(str(tmp_path / "rows.csv"), [(path, "a") for path in paths])
    for _, function, _ in steps.PYTHON_STEPS.values():
        assert steps.py_function_rate(csv_path, function, batch=2) > 0
    # Once, not per step: each call traces the job's decode and resize anew.
    rate, step_seconds = steps.sequential_loop(paths, PreprocessConfig().to_dict(), "gil_equalize", warm_up=1)
    assert rate > 0 and step_seconds > 0
