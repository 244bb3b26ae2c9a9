"""Mutation check of issue 24's promises and of the tests' shared fixtures (issue 38): each mutation breaks one
promise; the named tests (one or more, space-separated) must then fail.

    .venv/bin/python scripts/mutations.py [NAME_PREFIX ...]     # e.g. M1 M3; all by default

Each mutation is applied to the working tree, the test that guards it is run, and the file is
restored (also when interrupted). A mutation the suite misses prints "exit 0". Run it on a clean
tree: it edits files in place while a test runs.
"""

import argparse
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
MUTATIONS = [
    ("M1 no HNSW index", "beam_pipeline/database/index.py",
     "                    connection.execute(statement)\n",
     "                    pass\n",
     "tests/database/test_search_at_scale.py::test_default_search_uses_the_index_and_recalls_at_least_095"),
    ("M1b the query skips the index", "beam_pipeline/database/neighbours.py",
     '        if exact:\n            connection.execute("SET LOCAL enable_indexscan = off")',
     '        if True:\n            connection.execute("SET LOCAL enable_indexscan = off")',
     "tests/database/test_search_at_scale.py::test_default_search_uses_the_index_and_recalls_at_least_095"),
    ("M1c --ef_search not sent", "beam_pipeline/database/neighbours.py",
     "sql.Literal(ef_search_for(k, ef_search))", "sql.Literal(DEFAULT_EF_SEARCH)",
     "tests/database/test_search_at_scale.py::test_ef_search_is_honoured"),
    ("M1d filters without the iterative scan", "beam_pipeline/database/neighbours.py",
     '            connection.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")',
     "            pass",
     "tests/database/test_search_at_scale.py::test_a_filtered_search_returns_k_rows_all_matching"),
    ("M1e no exact answer when the iterative scan stops short", "beam_pipeline/database/neighbours.py",
     "        if short and _matching(", "        if False and _matching(",
     "tests/database/test_search_at_scale.py::"
     "test_a_filtered_search_falls_back_to_exact_when_the_iterative_scan_stops_early"),
    ("M2 the load never runs", "beam_pipeline/predict/load.py",
     '"problem": None}\n        try:',
     '"problem": None}\n        try:\n            return',
     "tests/end_to_end/test_predict.py::"
     "test_a_load_killed_part_way_into_a_fresh_table_then_rerun_gives_the_whole_table"),
    ("M3 no hash compare on resume", "beam_pipeline/common/shard_file.py",
     'if len(data) != status.get("bytes") or hashlib.sha256(data).hexdigest() != status.get("sha256"):',
     'if len(data) != status.get("bytes"):',
     "tests/preprocess/test_shard_writer.py"),
    ("M4 augmentation off", "tf_serving_input/reader.py",
     "    augment = training if augment is None else augment",
     "    augment = False",
     "tests/tf_serving_input/test_reader.py"),
    ("M5 unknown label not -1 (the constant)", "tf_serving_input/features.py",
     "UNKNOWN_LABEL_ID = -1", "UNKNOWN_LABEL_ID = 0",
     "tests/end_to_end/test_cli.py::test_transform_output_loads_and_holds_the_statistics"),
    ("M5b unknown label not -1 (the reader's lookup)", "tf_serving_input/reader.py",
     "        default_value=features.UNKNOWN_LABEL_ID)", "        default_value=0)",
     "tests/end_to_end/test_reader_serving.py::test_reader_unknown_label_and_missing_split"),
    ("M5c unknown label not -1 (TFT's vocabulary)", "tf_serving_input/normalization.py",
     "        label, default_value=features.UNKNOWN_LABEL_ID, weights=has_label,",
     "        label, default_value=0, weights=has_label,",
     "tests/end_to_end/test_cli.py::test_transform_output_loads_and_holds_the_statistics"),
    # Issue 38: what the tests share must be what they think it is. Each mutant breaks a shared fixture or the
    # in-process runner (tests/conftest.py, tests/ui_run.py, tests/in_process.py); the tests reading it must fail.
    ("M6 the session's table holds half its rows", "tests/conftest.py",
     '    run["quality"], run["quality_keys"] = ui_run.write_quality_folder(folder / "quality", run["job"])\n',
     '    run["quality"], run["quality_keys"] = ui_run.write_quality_folder(folder / "quality", run["job"])\n'
     '    import psycopg\n'
     '    with psycopg.connect(pg_url, autocommit=True) as c:\n'
     '        c.execute("DELETE FROM ui_sample WHERE key IN (SELECT key FROM ui_sample ORDER BY key LIMIT 9)")\n',
     "tests/ui/test_http.py tests/end_to_end/test_ui_browser.py"),
    ("M7 the session's UI run silently holds half the photos", "tests/ui_run.py",
     'names = sorted(os.listdir(os.path.join(SAMPLE_DIR, "images", label)))[:4]',
     'names = sorted(os.listdir(os.path.join(SAMPLE_DIR, "images", label)))[:2]',
     "tests/ui/test_http.py tests/end_to_end/test_ui_browser.py"),
    ("M8 the session's UI server starts without its quality folder", "tests/conftest.py",
     '"--quality_dir", ui_inputs["quality"], "--max_file_bytes", 1_000_000,',
     '"--max_file_bytes", 1_000_000,',
     "tests/ui/test_http.py tests/end_to_end/test_ui_browser.py"),
    ("M9 a command run in-process always exits 0", "tests/in_process.py",
     "                code = command.run(argv)\n",
     "                code = command.run(argv) and 0\n",
     "tests/end_to_end/test_predict_safety.py"),
    ("M9b a command run in-process loses its stderr", "tests/in_process.py",
     "Completed([module, *argv], code, stdout.getvalue(), stderr.getvalue())",
     'Completed([module, *argv], code, stdout.getvalue(), "")',
     "tests/end_to_end/test_quality.py"),
    ("M10 the scale-out reference run silently lost its largest shard's records", "tests/conftest.py",
     "    assert result.returncode == 0, result.stderr[-3000:]\n    return SmallRun(",
     "    assert result.returncode == 0, result.stderr[-3000:]\n"
     '    max((local / "data").glob("*.tfrecord"), key=lambda p: p.stat().st_size).write_bytes(b"")\n'
     "    return SmallRun(",
     "tests/scale_out/test_portable_runner.py::"
     "test_portable_runner_with_external_worker_pool_matches_the_local_runner"),
    ("M10b the scale-out local predictions silently lost their largest file", "tests/conftest.py",
     "    assert result.returncode == 0, result.stderr[-3000:]\n    return export, predictions",
     "    assert result.returncode == 0, result.stderr[-3000:]\n"
     '    max(predictions.rglob("*.parquet"), key=lambda p: p.stat().st_size).unlink()\n'
     "    return export, predictions",
     "tests/scale_out/test_portable_runner.py::test_predict_job_on_the_portable_runner_matches_the_local_run"),
    # Issue 51: a run with a step must never store images the step did not touch.
    ("M11 the job's TF call silently skips the TF steps", "beam_pipeline/preprocess/row_preprocessor.py",
     "lambda: preprocess_stepped_image(data, image_format, height_width, config, tf_steps),",
     "lambda: (preprocess_checked_image(data, image_format, height_width, config), tf.constant(False),"
     " tf.constant('')),",
     "tests/preprocess/test_image_steps.py::test_tf_steps_run_in_the_job_in_order_and_fail_only_their_rows"),
    ("M11b a run with a Python step silently skips the steps", "beam_pipeline/preprocess/python_steps.py",
     "            image = outcome\n", "            pass\n",
     "tests/preprocess/test_image_steps.py::test_a_python_step_runs_between_decode_and_resize_once_set_up"),
    # Every job run's two caches of Beam's answers (the unit step's second pay-down): kept by too coarse a key
    # or past a change, they answer for another DoFn or for options as they were.
    ("M12 a DoFn's state and timers kept by its class", "beam_pipeline/common/dofn_specs.py",
     "    function = method.__func__\n", "    function = type(dofn).__dict__.get(name, method.__func__)\n",
     "tests/common/test_dofn_specs.py"),
    ("M12b an options view kept after its options' values or flags were replaced",
     "beam_pipeline/common/option_views.py",
     "if view is None or view._flags is not options._flags or view._all_options is not options._all_options:",
     "if view is None:",
     "tests/common/test_option_views.py::test_a_view_made_before_the_values_or_flags_changed_is_made_again"),
]


def main(argv: list[str]) -> int:
    """Runs the mutations named by prefix (all without any); returns 1 when the suite missed one, 2 when a
    prefix names none."""
    parser = argparse.ArgumentParser(
        prog="scripts/mutations.py", description=__doc__.split("\n\n")[0],
        epilog="Mutations: " + "; ".join(name for name, *_ in MUTATIONS) + ".")
    parser.add_argument("only", nargs="*", metavar="NAME_PREFIX",
                        help="Run only the mutations whose name starts with one of these (M1, M6b, ...).")
    only = parser.parse_args(argv).only
    unknown = [prefix for prefix in only if not any(name.startswith(prefix) for name, *_ in MUTATIONS)]
    if unknown:
        print(f"error: {', '.join(unknown)} names no mutation (they are M1 to {MUTATIONS[-1][0].split()[0]}: "
              "see --help)", file=sys.stderr)
        return 2
    missed = 0
    for name, path, old, new, test in MUTATIONS:
        if only and not any(name.startswith(prefix) for prefix in only):
            continue
        file = ROOT / path
        original = file.read_text()
        if original.count(old) != 1:
            print(f"{name}: the code it mutates changed ({path}); update the mutation", flush=True)
            missed += 1
            continue
        file.write_text(original.replace(old, new))
        try:
            result = subprocess.run([str(ROOT / ".venv/bin/python"), "-m", "pytest", "-q", "-x", *test.split(),
                                     "-p", "no:cacheprovider"], cwd=ROOT, capture_output=True, text=True, timeout=1500)
        finally:
            file.write_text(original)
        failed = [line for line in result.stdout.splitlines() if line.startswith(("FAILED", "ERROR"))]
        last = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
        print(f"{name}: exit {result.returncode}; {failed[0] if failed else last}", flush=True)
        missed += result.returncode == 0
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
