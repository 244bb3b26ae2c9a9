"""Where a test run's time goes, per test file, from pytest's JUnit XML: `scripts/test.sh` prints it.

    .venv/bin/python scripts/test_times.py RUN.xml [--before BEFORE.xml] [--top N] [--markdown] [--by cpu]

Each file's seconds are the sum of its tests' setup, call and teardown (pytest's JUnit `time`), so a
module's shared fixture is counted in the test that first needs it. Under pytest-xdist the files run on
two workers at once: the column adds up to more than the step's wall time. Where the tests recorded their
CPU seconds (the JUnit property `cpu`, tests/cpu_time.py), a second column sums those: wall time on a
shared 2-core machine depends on what ran beside a test, its CPU time does not. With --before, the same
sums from an earlier run are shown beside (docs/testing.md's table is made this way).
"""

from __future__ import annotations

import argparse
import collections
import sys
import xml.etree.ElementTree as ElementTree


def seconds_per_file(junit_xml: str) -> tuple[dict[str, float], dict[str, int]]:
    """({test file: seconds}, {test file: tests}) of a JUnit XML written by pytest."""
    seconds, counts, _ = times_per_file(junit_xml)
    return seconds, counts


def times_per_file(junit_xml: str) -> tuple[dict[str, float], dict[str, int], dict[str, float]]:
    """({test file: wall seconds}, {test file: tests}, {test file: CPU seconds}) of a JUnit XML written by
    pytest; the CPU sums only hold files whose tests recorded the `cpu` property."""
    seconds: dict[str, float] = collections.defaultdict(float)
    counts: dict[str, int] = collections.defaultdict(int)
    cpu: dict[str, float] = collections.defaultdict(float)
    for case in ElementTree.parse(junit_xml).getroot().iter("testcase"):
        # classname is the dotted module path (and class): tests.end_to_end.test_cli -> tests/end_to_end/test_cli.py
        parts = case.get("classname", "").split(".")
        while parts and not parts[-1].startswith("test"):
            parts.pop()
        name = "/".join(parts) + ".py" if parts else case.get("file", "?")
        seconds[name] += float(case.get("time", 0))
        if case.find("skipped") is None:
            counts[name] += 1
        for prop in case.iter("property"):
            if prop.get("name") == "cpu":
                cpu[name] += float(prop.get("value", 0))
    return dict(seconds), dict(counts), dict(cpu)


def table(after: str, before: str | None, top: int | None, markdown: bool, by: str = "wall") -> list[str]:
    """The lines of the per-file table, slowest first (by wall or CPU seconds); CPU shown where recorded."""
    now, now_counts, now_cpu = times_per_file(after)
    then, then_counts, _ = times_per_file(before) if before else ({}, {}, {})
    if by == "cpu":
        names = sorted(set(now) | set(then), key=lambda name: -now_cpu.get(name, 0))
    else:
        names = sorted(set(now) | set(then), key=lambda name: -max(now.get(name, 0), then.get(name, 0)))
    shown = names[:top] if top else names
    with_cpu = bool(now_cpu) and not before
    if markdown:
        header = ["| test file | tests | seconds |" + (" CPU seconds |" if with_cpu else "")] if not before else [
            "| test file | tests before | seconds before | tests after | seconds after |"]
        lines = header + ["|" + "---|" * (header[0].count("|") - 1)]
    else:
        lines = []
    def row(label, tests_then, seconds_then, tests_now, seconds_now, cpu_now):
        if markdown and before:
            return f"| {label} | {tests_then} | {seconds_then:.0f} | {tests_now} | {seconds_now:.0f} |"
        if markdown:
            return f"| {label} | {tests_now} | {seconds_now:.0f} |" + (f" {cpu_now:.0f} |" if with_cpu else "")
        was = f"  (before: {seconds_then:6.1f} s)" if before else ""
        cpu = f"  {cpu_now:7.1f} s CPU" if with_cpu else ""
        return f"  {seconds_now:7.1f} s{cpu}  {tests_now:4d} tests  {label}{was}"

    for name in shown:
        lines.append(row(f"`{name}`" if markdown else name, then_counts.get(name, 0), then.get(name, 0),
                         now_counts.get(name, 0), now.get(name, 0), now_cpu.get(name, 0)))
    hidden = f", {len(names) - len(shown)} more files not shown" if len(shown) < len(names) else ""
    lines.append(row("**all files**" if markdown else f"in all{hidden}", sum(then_counts.values()),
                     sum(then.values()), sum(now_counts.values()), sum(now.values()), sum(now_cpu.values())))
    return lines


def main(argv: list[str] | None = None) -> int:
    """Prints the table; exit 2 on a missing or unreadable XML file."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("junit_xml", help="pytest's --junitxml output")
    parser.add_argument("--before", help="an earlier run's JUnit XML, for a before/after column")
    parser.add_argument("--top", type=int, default=None, help="only the N slowest files")
    parser.add_argument("--markdown", action="store_true", help="a Markdown table (docs/testing.md)")
    parser.add_argument("--by", choices=("wall", "cpu"), default="wall",
                        help="order by wall seconds (default) or by the CPU seconds the tests recorded")
    args = parser.parse_args(argv)
    try:
        print("\n".join(table(args.junit_xml, args.before, args.top, args.markdown, args.by)))
    except (OSError, ElementTree.ParseError) as error:
        print(f"error: cannot read a JUnit XML file: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
