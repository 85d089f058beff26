"""The `kassette` command: inspect, fork and cancel journals from a shell or an agent.

A thin skin over the library: each verb parses its arguments, calls one library function and
prints the answer, as JSON lines (`list`, `status`, `fork`, `cancel`, `export`, `import`), the
stored journal bytes (`dump`) or an indented text tree (`tree`). The command never runs
workflow code. Failures are one JSON line on stderr, `{"error": {"type": ..., "message":
...}}`, and the exit code tells their kind: 0 ok, 1 another kassette error (e.g. a run that
already ended), 2 usage, 3 run or storage not found, 4 journal corrupt, 5 storage error or a
stdout that cannot be written. See docs/cli.md.

Every verb but `import` reads existing runs (`fork` and `cancel` too), so a `file:` storage
whose directory does not exist is an error, not an empty store: most likely a wrong path or
working directory; `import` creates the store it writes into.
"""

from __future__ import annotations

import argparse
import errno
import itertools
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import IO, Any, NoReturn

from kassette._codec import parse_json, parse_timestamp, to_json
from kassette._fork import NO_RESULT
from kassette._journal import Journal
from kassette._lineage import (
    RunNode,
    build_forest,
    creation_order,
    draw_tree,
    source_run,
    tree_lines,
)
from kassette._sessions import cancel_run
from kassette.core import fork_run, run_status
from kassette.errors import (
    InvalidArgumentError,
    JournalCorruptionError,
    KassetteError,
    RunExistsError,
    RunNotFoundError,
    StorageError,
    StorageNotFoundError,
)
from kassette.storage import LocalStorage, Storage, check_exists, open_storage, validate_run_id

__all__ = ["main"]

DEFAULT_STORAGE = "file:.kassette"
STORAGE_ENVIRONMENT_VARIABLE = "KASSETTE_STORAGE"
CORRUPT = "corrupt"
_STATUSES = ("running", "suspended", "completed", "failed", "canceled", CORRUPT)

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_CORRUPT = 4
EXIT_STORAGE = 5

# Most specific first: the first class an error is an instance of decides its exit code.
_EXIT_CODES: tuple[tuple[type[BaseException], int], ...] = (
    (InvalidArgumentError, EXIT_USAGE),
    (RunExistsError, EXIT_USAGE),
    (RunNotFoundError, EXIT_NOT_FOUND),
    (JournalCorruptionError, EXIT_CORRUPT),
    (StorageError, EXIT_STORAGE),
    (KassetteError, EXIT_ERROR),
)


class UsageError(Exception):
    """The command line itself is wrong: unknown verb or flag, a missing or malformed value."""


class OutputError(OSError):
    """stdout cannot be written: closed, a full disk (`> /dev/full`), or a reader that went
    away (`| head -c 1`). Exit 5, like a storage error: the answer did not get out."""


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors become `UsageError` (reported as JSON) instead of exiting."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}")

    def _print_message(self, message: str, file: Any = None) -> None:
        if message and (file is None or file is sys.stdout):  # help: stdout, as every verb
            _write(message.encode())
        elif message:
            super()._print_message(message, file)


# -- output ----------------------------------------------------------------------------------


def _write(data: bytes) -> None:
    """Write bytes to stdout unchanged (the journal's bytes must pass through untouched);
    `OutputError` when they cannot be."""
    stdout = sys.stdout
    try:
        if stdout is None:  # the process started without a file descriptor 1
            raise OSError(errno.EBADF, "stdout is closed")
        stdout.flush()
        buffer = getattr(stdout, "buffer", None)
        if buffer is None:
            stdout.write(data.decode("utf-8", errors="replace"))
            stdout.flush()
        else:
            buffer.write(data)
            buffer.flush()
    except (OSError, ValueError) as exc:  # ValueError: a stdout closed within the process
        raise OutputError(f"cannot write to stdout: {exc}") from exc


def _json_line(value: Any) -> bytes:
    return (to_json(value) + "\n").encode()


def _report(exc: BaseException, stream: IO[str]) -> None:
    error: dict[str, Any] = {"type": type(exc).__name__, "message": str(exc)}
    if isinstance(exc, KassetteError):
        for key, value in (("runId", exc.run_id), ("stepId", exc.step_id), ("offset", exc.offset)):
            if value is not None:
                error[key] = value
    try:
        stream.write(to_json({"error": error}) + "\n")
        stream.flush()
    except (OSError, ValueError, AttributeError):  # no stderr either: the exit code tells
        pass


# -- the verbs -------------------------------------------------------------------------------


# a run as `list` and `tree` show it: run id, status, source, steps, edited (see `RunNode`)
_Listed = tuple[str, str, dict[str, Any] | None, int, bool]


def _listed(storage: Storage) -> list[_Listed]:
    """Every run, oldest first (see `kassette._lineage.creation_order`); a corrupt journal has
    no source to follow and no creation time."""
    runs: dict[str, _Listed] = {}
    created: dict[str, float | None] = {}  # POSIX seconds
    parents: dict[str, str | None] = {}  # the forks' sources
    status_of = Journal.status_of
    for run_id in storage.list_runs():
        snapshot = storage.read(run_id)
        if snapshot is None:
            continue  # deleted between listing and reading
        try:
            status = status_of(snapshot.data, run_id)
        except JournalCorruptionError:
            runs[run_id], created[run_id] = (run_id, CORRUPT, None, 0, False), None
            continue
        source = status.source
        if source is None:
            runs[run_id] = (run_id, status.status, None, status.steps, False)
        else:
            edited = _edits_fork_point(snapshot.data, run_id)
            runs[run_id] = (run_id, status.status, source, status.steps, edited)
            parents[run_id] = source_run(source)
        stamp = status.created_at
        try:
            created[run_id] = parse_timestamp(stamp) if stamp is not None else None
        except ValueError:  # an unreadable time: unknown, as none
            created[run_id] = None
    return [runs[run_id] for run_id in creation_order(created, parents)]


def _listed_runs(storage: Storage) -> list[RunNode]:
    """`_listed` as the nodes of the fork forest."""
    return [
        RunNode.of(run_id, status, source, steps, edited=edited)
        for run_id, status, source, steps, edited in _listed(storage)
    ]


def _edits_fork_point(data: bytes, run_id: str) -> bool:
    """Whether a fork recorded its fork point with a given result: the entries it writes after
    its own `start` are marked `edited` (only a journal that says so anywhere is parsed)."""
    if b'"edited":true' not in data:
        return False
    journal = Journal.parse(data, run_id)
    created = journal.state.created_offset
    if created is None:
        return False
    return any(e.get("edited") is True for e in journal.entries[created + 1 : created + 3])


def _list(storage: Storage, args: argparse.Namespace) -> None:
    runs: Iterator[_Listed] = iter(_listed(storage))
    if args.status is not None:
        runs = (run for run in runs if run[1] == args.status)
    # what `_json_line({"runId": ..., "status": ...})` writes, without a dict per run; one
    # write, not one per run
    lines = [
        f'{{"runId":{to_json(run_id)},"status":{to_json(status)}}}\n'
        for run_id, status, *_ in itertools.islice(runs, args.limit)
    ]
    _write("".join(lines).encode())


def _status(storage: Storage, args: argparse.Namespace) -> None:
    _write(_json_line(run_status(storage, args.run_id).to_dict()))


def _dump(storage: Storage, args: argparse.Namespace) -> None:
    snapshot = storage.read(validate_run_id(args.run_id))
    if snapshot is None:
        raise RunNotFoundError(f"run {args.run_id} not found", run_id=args.run_id)
    data = snapshot.data
    journal = Journal.parse(data, args.run_id)  # refuse to print a corrupt journal
    if args.offset >= journal.next_offset:
        return
    # Line k holds offset k (parse checked it), so skip `offset` lines and stop before the
    # torn tail, if any.
    start = 0
    for _ in range(args.offset):
        start = data.index(b"\n", start) + 1
    _write(data[start : data.rfind(b"\n") + 1])


def _fork(storage: Storage, args: argparse.Namespace) -> None:
    new_run_id = fork_run(
        storage,
        args.source_run_id,
        offset=args.from_offset,
        step=args.from_step,
        new_run_id=args.new_run_id,
        result=args.result,
    )
    _write(_json_line({"runId": new_run_id}))


def _tree(storage: Storage, args: argparse.Namespace) -> None:
    runs = {run.run_id: run for run in _listed_runs(storage)}
    roots = build_forest(runs.values())
    if args.run_id is not None:
        run_id = validate_run_id(args.run_id)
        if run_id not in runs:
            raise RunNotFoundError(f"run {run_id} not found", run_id=run_id)
        roots = tuple(
            root for root in roots if any(node.run_id == run_id for _, node in tree_lines([root]))
        )
    _write(draw_tree(roots, lambda node: _label(runs[node.run_id], runs)).encode())


def _cancel(storage: Storage, args: argparse.Namespace) -> None:
    _write(_json_line(cancel_run(storage, args.run_id, args.reason).to_dict()))


def _export(storage: Storage, args: argparse.Namespace) -> None:
    from kassette import explore  # pandas and pyarrow: needed by this verb only

    try:
        summary = explore.export(
            storage,
            args.out,
            format=args.format,
            overwrite=args.overwrite,
            partition_by=args.partition_by,
            skip_corrupt=args.skip_corrupt,
            include_content=args.include_content,
        )
    except OSError as exc:  # the output cannot be written (the storage errors are translated)
        raise StorageError(f"cannot export into {args.out}: {exc}") from exc
    except JournalCorruptionError as exc:
        raise JournalCorruptionError(
            f"{exc}; nothing was exported (--skip-corrupt exports the readable runs)",
            run_id=exc.run_id,
            offset=exc.offset,
        ) from exc
    _write(_json_line(summary))


def _import(storage: Storage, args: argparse.Namespace) -> None:
    from kassette import explore  # pandas and pyarrow (and Inspect AI for logs): this verb's

    importer = explore.import_otlp if args.source_format == "otlp" else explore.import_inspect
    try:
        report = importer(args.source, storage)
    except OSError as exc:  # the source cannot be read (the storage errors are translated)
        raise InvalidArgumentError(f"cannot read {args.source}: {exc}") from exc
    for run_id, missing in report.partial.items():
        _warn(
            {
                "message": f"run {run_id} is partial: its steps stop before what its source lacks",
                "runId": run_id,
                "missing": list(missing),
            }
        )
    _write(_json_line(report.to_dict()))


# -- fork lineage ----------------------------------------------------------------------------


def _label(run: RunNode, runs: dict[str, RunNode]) -> str:
    """The run's line in `tree`: its status, and where a fork was cut from (or that its source
    is gone)."""
    parent, offset = run.parent_run_id, run.fork_offset
    if parent is None:
        return f"{run.run_id} ({run.status})"
    if parent not in runs:
        return (
            f"{run.run_id} ({run.status}, fork of {parent} at offset {offset}, {parent} not found)"
        )
    edited = ", edited" if run.edited else ""
    return f"{run.run_id} ({run.status}, from offset {offset}{edited})"


# -- the parser ------------------------------------------------------------------------------


def _count(text: str) -> int:
    """An integer >= 0, for offsets and limits."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, not {text!r}")
    return value


def _json_value(text: str) -> Any:
    """A JSON value given on the command line (`kassette._codec.parse_json`'s rule)."""
    try:
        return parse_json(text, "the result")
    except InvalidArgumentError as exc:
        shown = text if len(text) <= 60 else f"{text[:57]}..."
        raise argparse.ArgumentTypeError(f"expected JSON, not {shown!r} ({exc})") from None


def _add_storage(parser: argparse.ArgumentParser, default: Any) -> None:
    parser.add_argument(
        "--storage",
        metavar="URL",
        default=default,
        help="file:PATH, memory: or s3://BUCKET[/PREFIX] "
        f"(default: ${STORAGE_ENVIRONMENT_VARIABLE}, else {DEFAULT_STORAGE})",
    )


Verb = Callable[[Storage, argparse.Namespace], None]


def _parser() -> _Parser:
    parser = _Parser(
        prog="kassette",
        description="Inspect, fork and cancel kassette runs (append-only JSONL journals).",
        epilog="Exit codes: 0 ok, 1 other kassette error, 2 usage, 3 run or storage not found, "
        "4 journal corrupt, 5 storage error. Errors are one JSON line on stderr.",
        allow_abbrev=False,
    )
    _add_storage(parser, None)
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)

    def verb(
        name: str, function: Verb, summary: str, *, lists: bool = False, creates: bool = False
    ) -> argparse.ArgumentParser:
        sub = verbs.add_parser(name, help=summary, description=summary, allow_abbrev=False)
        # SUPPRESS: a --storage given before the verb is not overwritten by this default.
        _add_storage(sub, argparse.SUPPRESS)
        sub.set_defaults(function=function, lists=lists, creates=creates)
        return sub

    sub = verb(
        "list",
        _list,
        "List runs oldest first, one {runId, status} JSON object per line.",
        lists=True,
    )
    sub.add_argument("--limit", type=_count, metavar="N", help="print at most N runs")
    sub.add_argument("--status", choices=_STATUSES, help="only runs with this status")

    sub = verb("status", _status, "Print a run's status as one JSON object.")
    sub.add_argument("run_id", metavar="RUN_ID")

    sub = verb("dump", _dump, "Print a run's journal entries as stored (JSONL).")
    sub.add_argument("run_id", metavar="RUN_ID")
    sub.add_argument(
        "--offset", type=_count, default=0, metavar="N", help="start at offset N (default 0)"
    )

    sub = verb("fork", _fork, "Copy a run's entries before a fork point into a new run.")
    sub.add_argument("source_run_id", metavar="SRC")
    point = sub.add_mutually_exclusive_group(required=True)
    point.add_argument(
        "--from-offset", type=_count, metavar="N", help="copy the entries with offset < N"
    )
    point.add_argument(
        "--from-step", metavar="ID", help="copy the entries before the step with this id"
    )
    sub.add_argument("--new-run-id", metavar="ID", help="id of the new run (default: random)")
    sub.add_argument(
        "--result",
        type=_json_value,
        default=NO_RESULT,
        metavar="JSON",
        help="record the step at the fork point with this result (edited), instead of running it",
    )

    sub = verb(
        "tree",
        _tree,
        "Print the fork lineage of all runs, or of the tree holding RUN_ID.",
        lists=True,
    )
    sub.add_argument("run_id", metavar="RUN_ID", nargs="?")

    sub = verb("cancel", _cancel, "Cancel a run; print its new status as one JSON object.")
    sub.add_argument("run_id", metavar="RUN_ID")
    sub.add_argument("--reason", metavar="R", help="recorded in the cancel entry")

    sub = verb(
        "export", _export, "Write every run's entries and a runs table into OUT.", lists=True
    )
    sub.add_argument("out", metavar="OUT", help="a directory, created if missing")
    sub.add_argument(
        "--format",
        choices=("parquet", "jsonl", "csv", "otlp"),
        default="parquet",
        help="default parquet; otlp: OpenTelemetry traces in OUT/traces.jsonl (docs/otel.md)",
    )
    sub.add_argument(
        "--overwrite", action="store_true", help="write into OUT even if it is not empty"
    )
    sub.add_argument(
        "--partition-by",
        metavar="COLUMN",
        action="append",
        help="write the entries as a hive-partitioned Parquet dataset by COLUMN (repeatable): "
        "run_bucket (at most 256 partitions), run_date, status, run_id, or an entry column",
    )
    sub.add_argument(
        "--skip-corrupt",
        action="store_true",
        help="export the readable runs and list the corrupt ones in the summary "
        "(default: a corrupt run stops the export, nothing written)",
    )
    sub.add_argument(
        "--include-content",
        action="store_true",
        help="with --format otlp: add prompts, answers (as chat messages), step results and "
        "the runs' input and result to the spans (left out by default)",
    )
    sub = verb(
        "import",
        _import,
        "Journal each trace (OTLP/JSON) or eval sample (Inspect log) of SOURCE as a run.",
        creates=True,
    )
    sub.add_argument(
        "source_format",
        choices=("otlp", "inspect"),
        metavar="otlp|inspect",
        help="otlp: OTLP/JSON lines or one document (traces.jsonl); inspect: a .eval or .json log",
    )
    sub.add_argument("source", metavar="SOURCE", help="the file to import")
    return parser


def _note_strays(storage: Storage) -> None:
    """Say once, on stderr, which files of a `file:` store are skipped as not runs (a name
    that is not a run id), so a listing goes on and the user still learns of them."""
    if not isinstance(storage, LocalStorage):
        return
    strays = storage.stray_files()
    if strays:
        message = (
            f"skipped {len(strays)} file(s) in {storage.path} that are not runs: their names "
            "are not run ids (1-200 of A-Z a-z 0-9 . _ -, starting with a letter or digit)"
        )
        _warn({"message": message, "files": strays})


def _warn(warning: dict[str, Any]) -> None:
    try:
        sys.stderr.write(to_json({"warning": warning}) + "\n")
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):  # no stderr: a warning is not worth failing
        pass


def _exit_code(exc: BaseException) -> int:
    return next(code for kind, code in _EXIT_CODES if isinstance(exc, kind))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the `kassette` command with `argv` (default `sys.argv[1:]`); return the exit code.

    Every failure is one JSON line on stderr and an exit code (see the module docstring)."""
    try:
        return _run(argv)
    except OutputError as exc:
        _silence_stdout()  # nothing more can reach it, not even the interpreter's last flush
        _report(exc, sys.stderr)
        return EXIT_STORAGE


def _run(argv: Sequence[str] | None) -> int:
    try:
        args = _parser().parse_args(argv)
    except UsageError as exc:
        _report(exc, sys.stderr)
        return EXIT_USAGE
    except SystemExit as exc:  # --help
        return exc.code if isinstance(exc.code, int) else EXIT_OK
    try:
        url = _storage_url(args.storage)
    except UsageError as exc:
        _report(exc, sys.stderr)
        return EXIT_USAGE
    try:
        storage = open_storage(url)
    except (KassetteError, ImportError) as exc:  # ImportError: the URL's extra is missing
        _report(exc, sys.stderr)
        return EXIT_USAGE
    try:
        if not args.creates:  # import creates the store it writes into
            check_exists(storage, url)
        if args.lists:
            _note_strays(storage)
        args.function(storage, args)
    except StorageNotFoundError as exc:
        _report(exc, sys.stderr)
        return EXIT_NOT_FOUND
    except KassetteError as exc:
        _report(exc, sys.stderr)
        return _exit_code(exc)
    except ImportError as exc:  # export without the explore extra
        _report(exc, sys.stderr)
        return EXIT_USAGE
    except OutputError:  # main's to report: stdout is gone
        raise
    except Exception as exc:  # what no reader expected: one JSON line all the same, no traceback
        _report(exc, sys.stderr)
        return EXIT_ERROR
    return EXIT_OK


def _storage_url(flag: str | None) -> str:
    """`--storage`, else `$KASSETTE_STORAGE` (empty counts as unset), else `file:.kassette`.
    An empty `--storage` is a mistake (`--storage "$UNSET"`), not a request for the default."""
    if flag is not None:
        if not flag:
            raise UsageError("kassette: --storage is empty; give a URL, or leave the flag out")
        return flag
    return os.environ.get(STORAGE_ENVIRONMENT_VARIABLE) or DEFAULT_STORAGE


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush cannot fail again."""
    if sys.stdout is None:
        return
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
