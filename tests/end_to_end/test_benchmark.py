"""Smoke test: the benchmark runs end to end at a tiny size and reports every ratio (no timing asserted)."""

import os
import subprocess
import sys

import outputs

SCRIPT = os.path.join(outputs.REPO_ROOT, "scripts", "benchmark.py")


def test_benchmark_runs_at_a_tiny_size(tmp_path):
    result = subprocess.run(
        [sys.executable, SCRIPT, "--images", "24", "--large_images", "3", "--memory_factor", "2",
         "--seconds", "0.3", "--search_vectors", "300", "--workdir", str(tmp_path / "work"),
         "--docs_dir", str(tmp_path / "docs")],
        capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    for name in ("job_vs_bare", "job_vs_pillow", "reader_vs_after", "train_reader_vs_no_augment",
                 "train_reader_vs_after", "shrink_speedup", "shrink_psnr", "memory_ratio", "predict_vs_model_predict",
                 "load_vs_bare_copy", "search_p50_ms", "predict_memory_ratio"):
        assert f"| {name} |" in result.stdout, name
    report = (tmp_path / "docs" / "benchmarks.md").read_text()
    assert "## Ratios against targets" in report and "## Where the time goes" in report
    for image_format in ("raw", "jpeg", "png"):  # Every storage format is measured.
        assert f"| {image_format} |" in report, image_format
    assert (tmp_path / "docs" / "benchmark_throughput.png").read_bytes().startswith(b"\x89PNG")
