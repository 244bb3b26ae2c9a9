"""The package Beam stages for remote workers (--setup_file) holds every module the job needs.

Dataflow (and any runner given --setup_file) builds the sdist with Beam's stager
and workers pip-install it: a module that `find_packages()` misses shows up only
there, as ModuleNotFoundError. Here the sdist is built by Beam's own stager code,
installed into a fresh virtualenv that cannot see the repository, and the job runs
from there, its worker processes included.

The fresh venv gets the heavy third-party packages (TensorFlow, Beam, ...) from
the project's .venv through a plain path in a .pth file. A path line in a .pth
adds that folder to sys.path without running the .pth files inside it, so the
project's own editable install there (an `__editable__` finder started by a .pth)
stays invisible: beam_pipeline and tf_serving_input can only come from the sdist.
"""

import glob
import os
import subprocess
import sys
import sysconfig

import pytest
from apache_beam.runners.portability.stager import Stager

import outputs
import scaleout

REPO_ROOT = outputs.REPO_ROOT

OWN_PACKAGES = ("beam_pipeline", "tf_serving_input")


def run(command, **kwargs):
    result = subprocess.run([str(c) for c in command], capture_output=True, text=True, timeout=600, **kwargs)
    assert result.returncode == 0, f"{command}\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}"
    return result


@pytest.fixture(scope="module")
def sdist_venv(tmp_path_factory):
    """Python of a fresh venv where the project is installed from its sdist only."""
    folder = tmp_path_factory.mktemp("sdist")
    # 1. The sdist, exactly as Beam's stager builds it for --setup_file (`python -m build --sdist
    #    --no-isolation` where `build` is installed, else `python setup.py sdist`).
    sdist = Stager._build_setup_package(os.path.join(REPO_ROOT, "setup.py"), str(folder / "sdist"))
    # 2. pip installs an sdist by building a wheel from the unpacked sdist alone; this venv's
    #    setuptools can (a fresh venv's older setuptools cannot without the `wheel` package).
    run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
         "--wheel-dir", folder / "wheel", sdist])
    (wheel,) = glob.glob(str(folder / "wheel" / "*.whl"))
    # 3. A fresh venv without system site-packages; the project installed from that wheel.
    venv = folder / "venv"
    run([sys.executable, "-m", "venv", venv])
    python = venv / "bin" / "python"
    assert "include-system-site-packages = false" in (venv / "pyvenv.cfg").read_text()
    run([python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", wheel])
    # 4. Third-party packages from the project's venv, which must not hold our packages itself.
    deps = sysconfig.get_paths()["purelib"]
    for name in OWN_PACKAGES:
        assert not os.path.exists(os.path.join(deps, name)) and not os.path.exists(os.path.join(deps, name + ".py"))
    new_site = run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    with open(os.path.join(new_site, "zz_third_party_from_project_venv.pth"), "w") as f:
        f.write(deps + "\n")
    return python, folder


def clean_env():
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYTHONHOME")}
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    return env


def test_fresh_venv_sees_our_packages_from_the_sdist_only(sdist_venv):
    python, folder = sdist_venv
    code = ("import sys, beam_pipeline, tf_serving_input, apache_beam, tensorflow_transform\n"
            "print(beam_pipeline.__file__); print(tf_serving_input.__file__)\n"
            "print(any('editable' in type(f).__name__.lower() or 'editable' in getattr(f, '__module__', '')"
            " for f in sys.meta_path))\n")
    lines = run([python, "-c", code], cwd=folder, env=clean_env()).stdout.split()
    venv_root = str(python.parent.parent)
    assert lines[0].startswith(venv_root) and lines[1].startswith(venv_root), lines
    assert not lines[0].startswith(REPO_ROOT) and not lines[1].startswith(REPO_ROOT)
    assert lines[-1] == "False"  # The project venv's editable finder is not active.


def test_job_runs_from_the_sdist_install_outside_the_repository(sdist_venv):
    python, folder = sdist_venv
    work = folder / "work"  # Working directory outside the repository.
    csv_path, rows = scaleout.make_small_dataset(work, count=6)
    out = work / "out"
    # Default runner: worker processes are started with this venv's python.
    result = scaleout.run_job(csv_path, out, python=python, cwd=work, env=clean_env())
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    manifest = outputs.manifest(out)
    assert (manifest["rows"], manifest["written"], manifest["failed"]) == (len(rows), len(rows) - 1, 1)
    assert manifest["versions"]["beam-image-pipeline"] == "0.1.0"
    assert manifest["statistics"]["label_vocabulary"]


# What docs/getting-started.md ("What the packages hold") says the sdist and the wheel hold, besides every module.
SDIST_FILES = ("LICENSE", "README.md", "pyproject.toml", "setup.py")
PACKAGE_DATA = "beam_pipeline/ui/templates/"
NOT_BUILD_INPUTS = (".venv", ".git", ".cache", ".mypy_cache", ".ruff_cache", ".pytest_cache", ".hypothesis", "build",
                    "dist", "output", "site", "*.egg-info", "__pycache__")


def test_a_release_build_warns_of_nothing_and_holds_what_the_docs_say(tmp_path):
    import shutil
    import tarfile
    import zipfile

    source = tmp_path / "source"  # The tree as a clean clone has it: nothing built in it yet.
    shutil.copytree(REPO_ROOT, source, ignore=shutil.ignore_patterns(*NOT_BUILD_INPUTS))
    built = run([sys.executable, "-m", "build", "--no-isolation", "--outdir", tmp_path / "dist", source],
                env=clean_env())
    log = (built.stdout + built.stderr).lower()
    # setuptools' deprecations (a license table, say) arrive as warnings in the build's output.
    assert "deprecat" not in log and "setuptoolswarning" not in log, log[-3000:]
    modules = sorted(os.path.relpath(path, source) for package in OWN_PACKAGES
                     for path in glob.glob(str(source / package / "**" / "*.py"), recursive=True))
    templates = sorted(os.path.relpath(path, source) for path in glob.glob(str(source / PACKAGE_DATA / "*.html")))
    assert modules and templates
    (sdist,) = glob.glob(str(tmp_path / "dist" / "*.tar.gz"))
    with tarfile.open(sdist) as archive:
        in_sdist = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert set(SDIST_FILES) | set(modules) | set(templates) <= in_sdist, set(SDIST_FILES + tuple(modules)) - in_sdist
    (wheel,) = glob.glob(str(tmp_path / "dist" / "*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        in_wheel = set(archive.namelist())
        (metadata,) = [name for name in in_wheel if name.endswith(".dist-info/METADATA")]
        headers = archive.read(metadata).decode()
    assert set(modules) | set(templates) <= in_wheel, set(modules) - in_wheel
    assert any(name.endswith(".dist-info/licenses/LICENSE") for name in in_wheel)
    assert "License-Expression: Apache-2.0" in headers and "License-File: LICENSE" in headers
    assert not any(name.startswith(("tests/", "scripts/", "docs/")) for name in in_wheel)
