"""The docs cannot drift from the code: the CLI reference holds every flag of every subcommand, the reference
pages are wired into the site, README is short, and every command line in README and docs/ parses.

`mkdocs build --strict` (scripts/test.sh's fast lane) checks links and pages; these check what it cannot.
"""

import glob
import importlib.util
import os
import re
import shlex

import pytest

from beam_pipeline import cli
from beam_pipeline.common import flags

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
README = os.path.join(REPO_ROOT, "README.md")
MAX_README_LINES = 250


def reference_hook():
    spec = importlib.util.spec_from_file_location("reference_hook", os.path.join(REPO_ROOT, "docs/hooks/reference.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def read(path):
    with open(os.path.join(REPO_ROOT, path), encoding="utf-8") as f:
        return f.read()


def sections(text):
    """{subcommand: its part of the generated CLI reference}."""
    parts = re.split(r"^## (\S+)$", text, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2]))


def test_every_flag_of_every_subcommand_is_in_the_cli_reference():
    by_name = sections(reference_hook().cli_reference())
    assert list(by_name) == list(cli.SUBCOMMANDS)
    for name in cli.SUBCOMMANDS:
        parser = cli.build_parser(name)
        for action in parser._actions:
            for spelling in action.option_strings or [action.dest]:
                assert f"`{spelling}" in by_name[name], f"{name} {spelling} is missing from the CLI reference"
        if action.choices and not action.option_strings:
            assert all(str(choice) in by_name[name] for choice in action.choices)


def test_every_reason_code_is_in_the_reasons_reference():
    from tf_serving_input import failures

    text = reference_hook().reasons_reference()
    for code, meaning in failures.REASONS.items():
        assert f"| `{code}` | " in text and meaning.split()[0] in text


def test_the_reference_pages_are_generated_by_the_site_build():
    config = read("mkdocs.yml")
    assert re.search(r"^hooks:\s*\n\s*- docs/hooks/reference\.py", config, flags=re.MULTILINE), "hook not wired"
    hook = reference_hook()
    for page, (_, marker, _) in hook.PAGES.items():
        assert marker in read(os.path.join("docs", page)), f"docs/{page} lost its marker"
        assert page in config, f"docs/{page} is not in mkdocs.yml's nav"


def test_the_committed_reference_pages_are_what_the_code_generates():
    """They are committed, so that GitHub shows them; `python docs/hooks/reference.py --write` rewrites them."""
    assert reference_hook().stale_pages() == []


def test_every_public_name_is_on_the_api_page():
    import tf_serving_input

    hook, page = reference_hook(), read("docs/api.md")
    # The names other pages send readers to (csv-and-images.md, reader-and-serving.md) among them.
    assert {"normalize_images", "read_statistics", "OutputLayout", "make_dataset"} <= set(tf_serving_input.__all__)
    for name in tf_serving_input.__all__:
        assert f"::: {hook.defining_module('tf_serving_input', name)}.{name}\n" in page, f"{name} is not on api.md"
        assert name in dir(tf_serving_input)


def test_readme_fits_on_a_few_screens():
    with open(README, encoding="utf-8") as f:
        assert len(f.read().splitlines()) <= MAX_README_LINES


def shell_blocks(text):
    """The fenced bash/sh/shell/console blocks of a Markdown text, continuation lines joined."""
    for block in re.findall(r"^```(?:bash|sh|shell|console)\s*\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL):
        yield from re.sub(r"\\\n\s*", " ", block).splitlines()


COMMAND_PREFIXES = {"beam-image-pipeline": None, "python -m beam_pipeline": None,
                    "beam-image-pipeline-predict": "predict", "beam-image-pipeline-search": "search",
                    "beam-image-pipeline-inspect": "inspect", "beam-image-pipeline-ui": "ui",
                    "python -m beam_pipeline.predict": "predict", "python -m beam_pipeline.search": "search",
                    "python -m beam_pipeline.quality": "quality", "python -m beam_pipeline.inspect": "inspect",
                    "python -m beam_pipeline.ui": "ui", "python -m beam_pipeline.database": "db"}


def commands(line):
    """(subcommand, its arguments) of each of our command lines in one shell line."""
    try:
        words = shlex.split(line, comments=True)
    except ValueError:
        return
    start = 0
    for i, word in enumerate(words + [";"]):
        if word in ("|", "&&", "||", ";") or i == len(words):
            command = [w for w in words[start:i] if "=" not in w or w.startswith("-")]  # Drop VAR=value prefixes.
            start = i + 1
            if command and command[0].split("/")[-1] == "python" and command[1:2] == ["-m"]:
                head = f"python -m {command[2]}" if len(command) > 2 else ""
                rest = command[3:]
            else:
                head = command[0].split("/")[-1] if command else ""
                rest = command[1:]
            if head not in COMMAND_PREFIXES:
                continue
            name = COMMAND_PREFIXES[head]
            if name is None:
                if rest[:1] and rest[0] in cli.SUBCOMMANDS:
                    name, rest = rest[0], rest[1:]
                elif rest[:1] and rest[0] in ("--help", "-h", "--version"):
                    continue
                else:
                    name = "preprocess"
            yield name, rest


def documented_command_lines():
    pages = ["README.md"] + sorted(os.path.relpath(p, REPO_ROOT)
                                   for p in glob.glob(os.path.join(REPO_ROOT, "docs", "**", "*.md"), recursive=True))
    for page in pages:
        for line in shell_blocks(read(page)):
            for name, argv in commands(line):
                yield page, line, name, argv


def test_documented_command_lines_are_found():
    found = {name for _, _, name, _ in documented_command_lines()}
    assert {"preprocess", "predict", "search", "quality", "ui"} <= found, found


def parse_problem(name, argv):
    """Why a command line of subcommand `name` would be refused (unknown flag, stray word, bad value), or None."""
    if "--help" in argv or "-h" in argv:
        return None
    try:
        _, leftover = cli.build_parser(name).parse_known_args(argv)
    except SystemExit:
        return "the parser refuses it"
    if name == "db" and argv[:1] == ["psql"]:
        return None
    takes_beam_options = name in ("preprocess", "predict", "quality")
    unknown = [arg.split("=")[0] for arg in leftover if arg.startswith("-")]
    beam = flags.beam_option_strings() if takes_beam_options and unknown else set()
    if [arg for arg in unknown if arg not in beam]:
        return f"unknown flags {[arg for arg in unknown if arg not in beam]}"
    stray = flags.stray_words(leftover) if takes_beam_options else [a for a in leftover if not a.startswith("-")]
    return f"stray words {stray}" if stray else None


def test_the_command_line_check_catches_a_typo_and_a_stray_word():
    ((name, argv),) = commands("beam-image-pipeline preprocess --input_csv a.csv --output_dir o --imag_size 64")
    assert "unknown flags ['--imag_size']" in parse_problem(name, argv)
    ((name, argv),) = commands("python -m beam_pipeline.search --key k extra")
    assert "stray words" in parse_problem(name, argv)
    ((name, argv),) = commands("X=1 .venv/bin/beam-image-pipeline quality --input_dir j --output_dir q "
                               "--runner FlinkRunner --flink_master localhost:8081 | head -1")
    assert name == "quality" and parse_problem(name, argv) is None


DOCUMENTED = list(documented_command_lines())


@pytest.mark.parametrize("page,line,name,argv", DOCUMENTED,
                         ids=[f"{page}-{i}-{name}" for i, (page, _, name, _) in enumerate(DOCUMENTED)])
def test_every_documented_command_line_parses(page, line, name, argv):
    """Each flag of a command in README or docs/ is one of the subcommand's flags, or Beam's own option."""
    assert parse_problem(name, argv) is None, f"{page}: {line!r}: {parse_problem(name, argv)}"


def test_the_scripts_the_docs_run_exist():
    for line in shell_blocks(read("README.md")):
        for script in re.findall(r"(?:^|\s)((?:\./)?scripts/[\w./-]+\.(?:sh|py))", line):
            assert os.path.isfile(os.path.join(REPO_ROOT, script)), f"README.md: {script} does not exist"


WRITTEN_BY = ("--output_dir", "--contact_sheet", "--export_dir")


def test_the_documented_commands_on_the_sample_write_under_output():
    """What the docs' commands on the sample write lands in output/ (in .gitignore), not the repository's root."""
    written = [(page, line, argv[argv.index(flag) + 1]) for page, line, _, argv in documented_command_lines()
               if "sample" in line for flag in WRITTEN_BY if flag in argv[:-1]]
    python = [(page, path) for page in ["README.md", *glob.glob("docs/*.md", root_dir=REPO_ROOT)]
              for path in re.findall(r'export_serving_model\(model, "[^"]*", "([^"]*)"\)', read(page))]
    assert written and python
    assert [(page, path) for page, _, path in written if not path.startswith("output/")] == []
    assert [(page, path) for page, path in python if not path.startswith("output/")] == []
    assert "output/" in read(".gitignore").split()


def _installed(name, extras=()):
    """{distribution: its extras asked for} that `pip install NAME[EXTRAS]` brings, from the installed metadata."""
    from importlib import metadata

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    found, todo = {}, [(name, tuple(extras))]
    while todo:
        name, extras = todo.pop()
        key = canonicalize_name(name)
        if set(extras) <= set(found.get(key, {""})) and key in found:
            continue
        found[key] = set(found.get(key, set())) | set(extras) | {""}
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        for text in requires:
            requirement = Requirement(text)
            if requirement.marker is None or any(requirement.marker.evaluate({"extra": extra})
                                                 for extra in found[key]):
                todo.append((requirement.name, tuple(requirement.extras)))
    return set(found)


def _console_scripts():
    """{console script: the distribution that installs it} of everything installed."""
    from importlib import metadata

    from packaging.utils import canonicalize_name

    return {entry.name: canonicalize_name(entry.dist.name) for entry in metadata.entry_points(group="console_scripts")}


def test_a_tool_the_plain_install_lacks_is_named_with_the_extra_that_installs_it():
    """scripts/run_local.sh installs the project without extras: where the docs run pytest or mkdocs from
    .venv, the same paragraph (or the one before it) names the extra that installs it."""
    plain = _installed("beam-image-pipeline")
    extras = {extra: _installed("beam-image-pipeline", [extra]) - plain for extra in ("test", "docs")}
    scripts, missing = _console_scripts(), []
    for page in ["README.md", *sorted(glob.glob("docs/*.md", root_dir=REPO_ROOT))]:
        paragraphs = re.split(r"\n\s*\n", read(page))
        for i, paragraph in enumerate(paragraphs):
            for tool in re.findall(r"\.venv/bin/(?:python -m )?([A-Za-z][\w.-]*)", paragraph):
                dist = scripts.get(tool)  # `python -m pytest` is pytest's too; our own modules are plain.
                if tool in ("python", "pip") or dist is None or dist in plain:
                    continue
                context = "\n".join(paragraphs[max(i - 1, 0):i + 1])
                named = [extra for extra, dists in extras.items() if dist in dists and f"[{extra}]" in context]
                if not named:
                    missing.append(f"{page}: .venv/bin/{tool} ({dist}) without its extra")
    assert scripts["pytest"] in extras["test"] and scripts["mkdocs"] in extras["docs"]
    assert missing == [], "\n".join(missing)
