"""The run every job shares, written once: check, lock, prepare, run with progress, verify, report, exit code.

    class MyJob(Launcher):
        def check(self, step): ...              # before any work: raise Refused (exit 2)
        def fingerprint(self): ...              # what makes two runs the same run
        def run(self, finished_earlier, step, run_log): ...  # run_pipeline, verified_statuses, ...

    exit_code = MyJob(layout, beam_args, pipeline_options, ...).execute()

Exit codes: 0 done; 1 the run failed (one line on stderr, the traceback in the
run's log); 2 refused before any work (one line naming what and why); 130
interrupted (Ctrl-C); 141 stdout closed early (`console_main`).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from beam_pipeline.common import flags, spark, terminal
from beam_pipeline.common.redact import redact

if TYPE_CHECKING:
    from apache_beam import Pipeline
    from apache_beam.options.pipeline_options import PipelineOptions

    from beam_pipeline.common.run_errors import RunLog, Step
    from tf_serving_input.layout import RunFolder

# The job's output folder: one of the layouts in tf_serving_input.layout (OutputLayout, PredictionLayout, ...).
LayoutT = TypeVar("LayoutT", bound="RunFolder")

# The exit status of a command stopped by Ctrl-C (128 + SIGINT), as the shell reports it.
INTERRUPTED = 130
# How many problem names a one-line error lists before "...".
MAX_LISTED = 10


class Refused(RuntimeError):
    """The job cannot run as asked; nothing was done (exit 2)."""


class InputRefused(ValueError):
    """The list of images cannot be used at all (raised by `beam_pipeline.inputs`; the message names the file,
    the line and the reason); nothing was done (exit 2)."""


class RunFlags(Protocol):
    """What a job's configuration says about the run itself (the flags of `flags.add_run_flags`)."""

    progress: bool
    max_error_rate: float
    overwrite: bool


def beam_options(beam_args: list[str]) -> Any:
    """Beam's pipeline options, with Beam's filesystems already using them, and Beam's notices kept quiet.

    The launcher reads the input and prepares the output folder through Beam's filesystems
    before any pipeline exists: s3:// (endpoint, credentials) needs the options now.
    """
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions

    from beam_pipeline.common import dofn_specs, option_views, runners

    runners.quiet_library_logs()
    dofn_specs.install()  # Every pipeline of this process then asks each DoFn method about its state once,
    option_views.install()  # and makes each view of its options once.
    options = PipelineOptions(beam_args)
    FileSystems.set_options(options)
    return options


def console_main(run: Callable[[], int]) -> None:
    """A console-script entry point: quiet start-up (see `quiet`), then exit with `run()`'s code.

    A closed stdout (`... | head -1`) ends the command quietly with 141, as SIGPIPE ends `cat`; Ctrl-C
    with one line and 130. Both are the shell's conventions (docs/exit-codes.md).
    """
    from beam_pipeline.common.fast_exit import skip_final_collection
    from beam_pipeline.common.quiet import quiet_startup

    quiet_startup(sys.argv[1:])
    skip_final_collection()
    try:
        try:
            code = run()
        except SystemExit as exit_:  # argparse's --help and usage errors: their output is flushed below too.
            if exit_.code is not None and not isinstance(exit_.code, int):
                raise
            code = exit_.code or 0
        sys.stdout.flush()  # Here, where a closed pipe can still be told apart from a failure.
    except BrokenPipeError:
        code = terminal.quiet_broken_pipe()
    except KeyboardInterrupt:
        terminal.report_interrupt()
        code = INTERRUPTED
    if terminal.stdout_closed() and code == 0:
        code = terminal.BROKEN_PIPE_STATUS
    sys.exit(code)


def listed(items: list[str], limit: int = MAX_LISTED) -> str:
    """Up to `limit` items joined by ', ', then ' ...' when there are more."""
    return ", ".join(items[:limit]) + (" ..." if len(items) > limit else "")


class Launcher(Generic[LayoutT]):
    """One run of a job into an output folder (`layout`: a tf_serving_input.layout layout)."""

    def __init__(self, layout: LayoutT, beam_args: list[str], pipeline_options: PipelineOptions,
                 run_flags: RunFlags) -> None:
        self.layout = layout
        self.beam_args = beam_args
        self.pipeline_options = pipeline_options
        self.progress = run_flags.progress
        self.max_error_rate = run_flags.max_error_rate
        self.overwrite = run_flags.overwrite

    # ------------------------------------------------------------------ what a job fills in
    def first_step(self) -> str:
        """What the launcher does first, for a one-line error ('reading the CSV x.csv')."""
        return f"preparing the output folder {self.layout.root}"

    def check(self, step: Step) -> None:
        """Checks the inputs before any work; raises Refused (or another refusal) naming what is wrong."""

    def fingerprint(self) -> dict[str, Any]:
        """What makes two runs the same run (resumed) rather than another one (refused)."""
        raise NotImplementedError

    def run(self, finished_earlier: int, step: Step, run_log: RunLog) -> int:
        """The run itself, in the locked and prepared folder; returns the exit code."""
        raise NotImplementedError

    def refusals(self) -> tuple[type[BaseException], ...]:
        """Exception types, besides the shared ones, that mean "refused before any work" (exit 2)."""
        return ()

    def failure_line(self, error: Exception, run_log: RunLog) -> str | None:
        """A job's own one-line error for a known failure (exit 1), or None for the generic line."""
        return None

    def locked(self, step: Step, run_log: RunLog) -> int:
        """What runs under the folder's lock: prepare it (resume, refuse or overwrite), then `run`."""
        from beam_pipeline.common import output_dir

        finished = output_dir.prepare(self.layout, self.fingerprint(), self.overwrite)
        return self.run(finished, step, run_log)

    # ------------------------------------------------------------------ the shared run
    def execute(self) -> int:
        """Runs the job; returns its exit code. Every failure reaches the user as one line."""
        from beam_pipeline.common import output_dir, run_errors, storage_errors
        from beam_pipeline.common.run_lock import LockHeld, OutputLock

        step = run_errors.Step(self.first_step())
        run_log = run_errors.RunLog(self.layout.log_dir)
        try:
            unreachable = spark.unreachable_master(self.beam_args)  # In seconds: Spark's client retries for minutes.
            if unreachable:
                raise Refused(unreachable)
            self.check(step)
            problem = storage_errors.folder_problem(self.layout.root)  # A missing or forbidden bucket: 403/404.
            if problem is not None:
                raise Refused(f"--output_dir {self.layout.root}: {problem}")
            if os.path.exists(self.layout.root) and not os.path.isdir(self.layout.root):  # A local file.
                raise Refused(f"--output_dir {self.layout.root} is a file, not a folder: name a folder (it is "
                              "created when missing)")
            step.now(f"preparing the output folder {self.layout.root}")
            with OutputLock(self.layout.lock_file) as lock:
                if lock.notice:
                    terminal.notice(f"notice: {lock.notice}")
                return self.locked(step, run_log)
        # mypy cannot type a starred tuple in `except`; refusals() does return exception types.
        except (Refused, InputRefused, output_dir.OutputDirError, LockHeld,  # type: ignore[misc]
                *self.refusals()) as error:
            print(redact(f"error: {error}"), file=sys.stderr)
            return 2
        except BrokenPipeError:
            raise  # Stdout closed under the command: console_main ends it quietly (141), not as a failed run.
        except Exception as error:  # noqa: BLE001 - the run itself failed: one line, the traceback in a log.
            line = self.failure_line(error, run_log)
            if line is None:
                line = run_errors.one_line(error, step.doing, run_log.write(error))
            print(redact(line), file=sys.stderr)
            return 1

    def announce(self, header: str, finished_earlier: int) -> None:
        """Prints what the run is about to do, and what it resumes."""
        terminal.notice(header)
        if finished_earlier:
            terminal.notice(f"Resuming: {finished_earlier} shard(s) finished by an earlier run of this input and "
                            "configuration are checked: kept when they verify, rewritten otherwise")

    def run_pipeline(self, step: Step, run_log: RunLog, doing: str, build: Callable[[Pipeline], object],
                     shards: int = 0, rows: int = 0, options: PipelineOptions | None = None,
                     then: str | None = None) -> float:
        """Builds (`build(pipeline)`) and runs one Beam pipeline; returns its wall seconds.

        Progress lines follow the shard status files while `shards` complete (local runners), and
        announce `then` (what the pipeline does after its last shard) once they have; the workers'
        logs go to the run's log. `options` default to the job's pipeline options.
        """
        import apache_beam as beam

        from beam_pipeline.common import runners
        from beam_pipeline.common.progress import ShardProgress

        options = options if options is not None else self.pipeline_options
        monitor = None
        if shards and self.progress and flags.is_local_runner(self.beam_args):
            monitor = ShardProgress(self.layout, shards, rows, then=then)
            monitor.start()
        started = time.time()
        step.now(doing)
        try:
            with (runners.workers_stop_on_interrupt(), run_log.capture(),
                  beam.Pipeline(runner=runners.local_runner(options), options=options) as pipeline):
                build(pipeline)
        finally:
            if monitor:
                monitor.stop()
        return time.time() - started

    def verified_statuses(self, step: Step, names: list[str]) -> list[dict[str, Any]] | None:
        """Every expected shard's status, each file present with its recorded size; None (after one line) if not."""
        from beam_pipeline.common import report

        step.now(f"checking the shards in {self.layout.data_dir}")
        statuses = report.read_shard_statuses(self.layout, names)
        problems = report.shard_file_problems(self.layout, statuses)
        if problems:
            print(f"error: {len(problems)} shard file(s) are missing or damaged after the run: {listed(problems)}; "
                  "run the same command again to rewrite them", file=sys.stderr)
            return None
        # Every shard is published: what an abandoned attempt left (one a runner re-ran elsewhere) is garbage.
        from apache_beam.io.filesystems import FileSystems

        from beam_pipeline.common import output_dir

        leftovers = output_dir.leftover_attempts(self.layout)
        if leftovers:
            FileSystems.delete(leftovers)
        return statuses

    def error_budget_code(self, manifest: dict[str, Any]) -> int:
        """1 (after one line naming the top reasons) when more than --max_error_rate of the rows failed, else 0."""
        rows, failed = manifest["rows"], manifest["failed"]
        if not rows or failed / rows <= self.max_error_rate:
            return 0
        reasons = "; ".join(f"{reason}: {count}" for reason, count in list(manifest["failed_by_reason"].items())[:5])
        print(f"error: {failed} of {rows} rows failed ({failed / rows:.1%}), more than --max_error_rate="
              f"{self.max_error_rate:g}. Top reasons: {reasons}. Every failed row is listed in "
              f"{self.layout.errors_file}", file=sys.stderr)
        return 1
