"""The `koto` command: Markdown-template state machines for coding agents, on kassette journals.

    koto init NAME --template T.md [--var K=V]... [--execution-dir DIR]    start a session
    koto next NAME [--with-data JSON|@file] [--to STATE] [--full] [--no-cleanup]
    koto rewind NAME | cancel NAME [--cleanup] | status NAME
    koto decisions record NAME --with-data JSON|@file | decisions list NAME
    koto context add|get|exists|list|remove NAME [KEY] ...
    koto template compile T.md [--allow-legacy-gates]
    koto template export T.md [--format mermaid|html] [--output FILE]
    koto session list | dir NAME | cleanup NAME
    koto config get|set|unset|list ...

A thin skin over `kassette.koto`: every verb prints one JSON value on stdout (`session dir`,
`config get` and `context get` print plain text or bytes). Errors are JSON on stdout too:
`{"error": {"code", "message", "details"}}` from `next`, `{"error": MESSAGE, "code",
"command"}` from the other verbs; when stdout itself cannot be written, the error goes to stderr.
Warnings (a template's W3, legacy gates) go to stderr. Exit codes: 0 ok (a blocked gate is an
answer), 1 transient, 2 the caller's mistake, 3 template or infrastructure (see
kassette/koto/_errors.py).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from kassette.errors import KassetteError
from kassette.koto._errors import EXIT_INFRASTRUCTURE, EXIT_OK, KotoError, from_kassette

__all__ = ["main"]


class _Parser(argparse.ArgumentParser):
    """Argument errors become a `usage` KotoError (reported as JSON) instead of exiting."""

    def error(self, message: str) -> NoReturn:
        raise KotoError("usage", f"{self.prog}: {message}")


class _Formatter(argparse.HelpFormatter):
    """argparse's formatter with a fixed width: finding the terminal's imports shutil."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, width=int(os.environ.get("COLUMNS") or 100) - 2)


def _session_verb(command: argparse.ArgumentParser) -> None:
    command.add_argument("name")


def _init_verb(command: argparse.ArgumentParser) -> None:
    command.add_argument("name")
    command.add_argument("--template", required=True, help="the template's Markdown file")
    command.add_argument("--var", action="append", default=[], metavar="KEY=VALUE")
    command.add_argument(
        "--execution-dir", metavar="DIR", help="where gates run (default: this directory)"
    )
    command.add_argument(
        "--allow-legacy-gates", action="store_true", help="no warning for gates without routing"
    )


def _next_verb(command: argparse.ArgumentParser) -> None:
    command.add_argument("name")
    command.add_argument("--with-data", metavar="JSON|@FILE", help="evidence for this state")
    command.add_argument("--to", metavar="STATE", help="take a declared transition directly")
    command.add_argument("--full", action="store_true", help="include details every time")
    command.add_argument("--no-cleanup", action="store_true", help="keep a finished session")


def _decisions_verb(command: argparse.ArgumentParser) -> None:
    actions = _actions(command)
    action = actions.add_parser("record", help="record a decision in the current state")
    action.add_argument("name")
    action.add_argument(
        "--with-data",
        required=True,
        metavar="JSON|@FILE",
        help='{"choice", "rationale", "alternatives_considered"?}',
    )
    actions.add_parser("list", help="this state's decisions").add_argument("name")


def _cancel_verb(command: argparse.ArgumentParser) -> None:
    command.add_argument("name")
    command.add_argument("--cleanup", action="store_true", help="also delete it")


def _actions(command: argparse.ArgumentParser) -> Any:
    return command.add_subparsers(
        dest="action", parser_class=_Parser, required=True, metavar="ACTION"
    )


def _context_verb(command: argparse.ArgumentParser) -> None:
    actions = _actions(command)
    action = actions.add_parser("add", help="store stdin (or --from-file) under KEY")
    action.add_argument("name")
    action.add_argument("key")
    action.add_argument("--from-file", metavar="PATH")
    action = actions.add_parser("get", help="print KEY's content (or write --to-file)")
    action.add_argument("name")
    action.add_argument("key")
    action.add_argument("--to-file", metavar="PATH")
    for name, text in (("exists", "exit 0 if KEY exists, 1 if not"), ("remove", "forget KEY")):
        action = actions.add_parser(name, help=text)
        action.add_argument("name")
        action.add_argument("key")
    action = actions.add_parser("list", help="the keys, as a JSON array")
    action.add_argument("name")
    action.add_argument("--prefix", default="")


def _template_verb(command: argparse.ArgumentParser) -> None:
    actions = _actions(command)
    action = actions.add_parser("compile", help="print the compiled JSON")
    action.add_argument("source")
    action.add_argument(
        "--allow-legacy-gates",
        action="store_true",
        help="accept states whose gates no `when` routes on (they only block)",
    )
    action = actions.add_parser("export", help="draw it as Mermaid or HTML")
    action.add_argument("source", help="a template (.md) or a compiled template (.json)")
    action.add_argument("--format", choices=("mermaid", "html"), default="mermaid")
    action.add_argument("--output", metavar="FILE")


def _sessions_verb(command: argparse.ArgumentParser) -> None:
    actions = _actions(command)
    actions.add_parser("list", help="every session, as a JSON array")
    for name, text in (("dir", "the session's local directory"), ("cleanup", "delete it")):
        actions.add_parser(name, help=text).add_argument("name")


def _config_verb(command: argparse.ArgumentParser) -> None:
    actions = _actions(command)
    actions.add_parser("get", help="print a resolved value").add_argument("key")
    for name, text in (
        ("set", "set in the project config (or --user)"),
        ("unset", "remove from the project config (or --user)"),
    ):
        action = actions.add_parser(name, help=text)
        action.add_argument("key")
        if name == "set":
            action.add_argument("value")
        action.add_argument("--user", action="store_true")
    action = actions.add_parser("list", help="the resolved config, credentials redacted")
    action.add_argument("--json", action="store_true")


_VERBS: dict[str, tuple[str, Any]] = {
    "init": ("start a session from a template", _init_verb),
    "next": ("what to do now; submit evidence; advance", _next_verb),
    "rewind": ("go back to the previous state", _session_verb),
    "cancel": ("end a session", _cancel_verb),
    "status": ("the session's state, read-only", _session_verb),
    "decisions": ("record or list the agent's decisions", _decisions_verb),
    "context": ("content handed to koto", _context_verb),
    "template": ("compile or draw a template", _template_verb),
    "session": ("list, locate, delete sessions", _sessions_verb),
    "config": ("layered settings", _config_verb),
}


def _parser(verb: str | None) -> argparse.ArgumentParser:
    """The command line's parser; with a known `verb`, only that verb's arguments are built
    (an agent runs one verb per process, and building them all is most of argparse's cost)."""
    parser = _Parser(
        prog="koto",
        description="Markdown-template workflows for coding agents.",
        formatter_class=_Formatter,
    )
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    verbs = parser.add_subparsers(dest="verb", parser_class=_Parser, metavar="VERB")
    for name, (text, build) in _VERBS.items():
        command = verbs.add_parser(name, help=text, formatter_class=_Formatter)
        if verb is None or verb == name or verb not in _VERBS:
            build(command)
    return parser


# -- output ----------------------------------------------------------------------------------


class _StdoutFailed(Exception):
    """Stdout cannot be written (a full disk, a closed descriptor): reported on stderr."""


def _print_text(text: str) -> None:
    if sys.stdout is None:  # started with descriptor 1 closed
        raise _StdoutFailed("stdout is closed")
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except (OSError, ValueError) as exc:  # ValueError: stdout was closed
        raise _StdoutFailed(str(exc)) from exc


def _print_json(value: Any) -> None:
    _print_text(json.dumps(value, ensure_ascii=False, sort_keys=True) + "\n")


def _print_warnings(warnings: Sequence[str]) -> None:
    for warning in warnings:
        sys.stderr.write(f"warning: {warning}\n")


def _print_bytes(data: bytes) -> None:
    _print_text("")
    assert sys.stdout is not None
    try:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    except BrokenPipeError:
        raise
    except (OSError, ValueError) as exc:
        raise _StdoutFailed(str(exc)) from exc


def _write_output(path: str, data: bytes) -> str:
    """Write an output file (`--output`, `--to-file`); its absolute path. A file is replaced
    atomically; a device or pipe there (`/dev/stdout`) is written into as it is."""
    import stat

    from kassette.storage import replace_file

    target = Path(path).absolute()
    try:
        try:
            special = not stat.S_ISREG(os.stat(target).st_mode)
        except FileNotFoundError:
            special = False
        if special and not target.is_dir():
            with open(target, "wb") as file:
                file.write(data)
        else:
            replace_file(target, data)
    except OSError as exc:
        raise KotoError("output_error", f"cannot write {path}: {exc}") from exc
    return str(target)


def _report(exc: KotoError, verb: str, *, stream: Any = None) -> None:
    if verb == "next":
        error: dict[str, Any] = {"code": exc.code, "message": exc.message, "details": exc.details}
        error.update(exc.extra)
        answer: dict[str, Any] = {"error": error}
    else:
        answer = {"error": exc.message, "code": exc.code, "command": verb, **exc.extra}
    if stream is None:
        _print_json(answer)
    else:
        stream.write(json.dumps(answer, ensure_ascii=False, sort_keys=True) + "\n")


# -- the verbs -------------------------------------------------------------------------------


def _store() -> Any:
    from kassette.koto._config import koto_home, load
    from kassette.koto._store import open_store

    home = koto_home()
    return open_store(home, load(home, Path.cwd()))


def _run(args: argparse.Namespace) -> int:
    verb = args.verb
    if verb in ("init", "next", "rewind", "cancel", "status"):
        from kassette.koto import _engine as engine
        from kassette.koto import _session as session

        store = _store()
        if verb == "init":
            from kassette.koto._compiler import compile_template

            template = compile_template(
                args.template, legacy_gates="allow" if args.allow_legacy_gates else "warn"
            )
            _print_warnings(template.warnings)
            answer = session.init(
                store,
                args.name,
                template,
                args.template,
                args.var,
                execution_dir=args.execution_dir,
            )
            _print_json(answer)
        elif verb == "next":
            _print_json(
                engine.next_step(
                    store,
                    args.name,
                    data=args.with_data,
                    to=args.to,
                    full=args.full,
                    cleanup=not args.no_cleanup,
                )
            )
        elif verb == "rewind":
            _print_json(session.rewind(store, args.name))
        elif verb == "cancel":
            _print_json(session.cancel(store, args.name, cleanup=args.cleanup))
        else:
            _print_json(session.status(store, args.name))
        return EXIT_OK
    if verb == "decisions":
        from kassette.koto import _decisions as decisions

        store = _store()
        if args.action == "record":
            _print_json(decisions.record(store, args.name, args.with_data))
        else:
            _print_json(decisions.listed(store, args.name))
        return EXIT_OK
    if verb == "context":
        return _context(args)
    if verb == "template":
        return _template(args)
    if verb == "session":
        return _session(args)
    return _config(args)


def _context(args: argparse.Namespace) -> int:
    from kassette.koto import _context as context

    store = _store()
    if args.action == "add":
        if args.from_file:
            try:
                data = Path(args.from_file).read_bytes()
            except OSError as exc:
                raise KotoError("usage", f"cannot read {args.from_file}: {exc}") from exc
        else:
            data = sys.stdin.buffer.read()
        context.add(store, args.name, args.key, data)
    elif args.action == "get":
        data = context.get(store, args.name, args.key)
        if args.to_file:
            _write_output(args.to_file, data)
        else:
            _print_bytes(data)
    elif args.action == "exists":
        return EXIT_OK if context.exists(store, args.name, args.key) else 1
    elif args.action == "list":
        _print_json(context.keys(store, args.name, args.prefix))
    else:
        context.remove(store, args.name, args.key)
    return EXIT_OK


def _template(args: argparse.Namespace) -> int:
    from kassette.koto._compiler import compile_template
    from kassette.koto._template import Template, read_source

    if args.action == "export" and args.source.endswith(".json"):
        data = read_source(args.source)
        try:
            template = Template.from_json(data)
        except (ValueError, RecursionError) as exc:
            raise KotoError("template_error", f"cannot read {args.source}: {exc}") from exc
    else:
        strict = args.action == "compile" and not args.allow_legacy_gates
        template = compile_template(args.source, legacy_gates="refuse" if strict else "warn")
        _print_warnings(template.warnings)
    if args.action == "compile":
        _print_bytes(template.text)
        return EXIT_OK
    from kassette.koto._export import export

    text = export(template, args.format)
    if args.output:
        written = _write_output(args.output, text.encode("utf-8"))
        _print_json({"format": args.format, "output": written})
    else:
        _print_text(text)
    return EXIT_OK


def _session(args: argparse.Namespace) -> int:
    from kassette.koto._config import koto_home
    from kassette.koto._names import session_dir, validate_name

    if args.action == "dir":
        _print_text(f"{session_dir(koto_home(), validate_name(args.name))}\n")
        return EXIT_OK
    store = _store()
    if args.action == "list":
        from kassette.koto._session import session_rows

        _print_json(session_rows(store))
    else:
        store.remove(validate_name(args.name))
        _print_json({"name": args.name, "cleaned_up": True})
    return EXIT_OK


def _config(args: argparse.Namespace) -> int:
    from kassette.koto import _config as config

    home, cwd = config.koto_home(), Path.cwd()
    if args.action in ("set", "unset"):
        path = config.user_config_path(home) if args.user else config.project_config_path(cwd)
        value = args.value if args.action == "set" else None
        config.update(path, args.key, value, project=not args.user)
        _print_json(
            {
                "key": args.key,
                "value": None
                if value is None
                else (config.REDACTED if args.key in config.CREDENTIALS else value),
                "file": str(path),
            }
        )
        return EXIT_OK
    resolved = config.load(home, cwd)
    if args.action == "get":
        config.check_key(args.key)
        value = resolved.get(args.key)
        if value is None:
            raise KotoError("not_set", f"{args.key} is not set")
        shown = config.REDACTED if args.key in config.CREDENTIALS else value
        _print_text(f"{shown}\n")
    elif args.json:
        _print_json(resolved.redacted())
    else:
        _print_text(config.to_toml(resolved.redacted()))
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Run the `koto` command; returns the exit code."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    verb = next((a for a in arguments if not a.startswith("-")), "koto")
    try:
        args = _parser(verb).parse_args(arguments)
        if args.version:
            from kassette import __version__

            _print_text(f"koto (kassette {__version__})\n")
            return EXIT_OK
        if args.verb is None:
            raise KotoError("usage", "koto: a verb is required (try koto --help)")
        return _run(args)
    except _StdoutFailed as exc:
        return _stdout_failed(exc, verb)
    except (KotoError, KassetteError) as exc:  # storage failing underneath koto, ...
        failure = from_kassette(exc)
        try:
            _report(failure, verb)
        except _StdoutFailed as stdout:
            return _stdout_failed(stdout, verb)
        return failure.exit_code
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_INFRASTRUCTURE
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a bug: the agent still gets JSON, the traceback goes to stderr
        import traceback

        traceback.print_exc()
        failure = KotoError("internal_error", f"internal error: {exc!r}")
        try:
            _report(failure, verb)
        except _StdoutFailed as stdout:
            return _stdout_failed(stdout, verb)
        return failure.exit_code


def _stdout_failed(exc: _StdoutFailed, verb: str) -> int:
    """Report on stderr that stdout failed; what is still buffered for it goes nowhere."""
    failure = KotoError("output_error", f"cannot write to stdout: {exc}")
    _report(failure, verb, stream=sys.stderr)
    if sys.stdout is not None:
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return failure.exit_code


if __name__ == "__main__":
    sys.exit(main())
