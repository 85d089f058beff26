"""Hostile input to the `koto` command: every failure is one JSON error with its documented exit
code, nothing is journaled, nothing hangs, no traceback (issue 12, items 6 and 7).

Each test runs the real command in subprocesses and checks the exit code, the JSON answer,
stderr and the session's journal bytes.
"""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest
from conftest import Koto, Result

TASK = "TASK=t"


def refused(result: Result, code: str, exit_code: int) -> dict[str, object]:
    assert result.code == exit_code, (result.code, result.stdout, result.stderr)
    assert b"Traceback" not in result.stderr, result.stderr.decode()
    answer = result.json
    error = answer["error"]
    if isinstance(error, dict):  # `koto next`'s structured error
        assert error["code"] == code, error
        return error
    assert answer["code"] == code, answer
    return dict(answer)


@pytest.fixture
def started(koto: Koto) -> Koto:
    koto.ok("init", "job", "--template", koto.template("lifecycle"), "--var", TASK)
    return koto


@pytest.mark.parametrize(
    "data",
    [
        '{"approach": NaN}',
        '{"approach": Infinity}',
        '{"approach": -Infinity}',
        '{"approach": 1e999}',
        '{"approach": "a", "extra": [1, {"x": -1e400}]}',
    ],
)
def test_item6_non_finite_evidence_is_invalid_submission_and_nothing_is_journaled(
    started: Koto, data: str
) -> None:
    koto = started
    before = koto.journal_path("job").read_bytes()
    error = refused(koto("next", "job", "--with-data", data), "invalid_submission", 2)
    assert "number" in str(error["message"])
    assert koto.journal_path("job").read_bytes() == before  # not even a `start` entry
    evidence = koto.write("evidence.json", data)
    refused(koto("next", "job", "--with-data", f"@{evidence}"), "invalid_submission", 2)
    assert koto.journal_path("job").read_bytes() == before
    assert koto.ok("next", "job", "--with-data", '{"approach": "a"}')["state"] == "build"


@pytest.mark.parametrize("depth", [33, 990, 10_000])
def test_item6_deeply_nested_evidence_is_invalid_submission(started: Koto, depth: int) -> None:
    koto = started
    before = koto.journal_path("job").read_bytes()
    data = '{"approach": "a", "deep": ' + "[" * depth + "]" * depth + "}"
    error = refused(koto("next", "job", "--with-data", data), "invalid_submission", 2)
    assert "nested more than 32 levels" in str(error["message"])
    record = koto("decisions", "record", "job", "--with-data", data)
    refused(record, "invalid_submission", 2)
    assert koto.journal_path("job").read_bytes() == before


def test_item6_a_lone_surrogate_in_evidence_is_invalid_submission(started: Koto) -> None:
    koto = started
    before = koto.journal_path("job").read_bytes()
    result = koto("next", "job", "--with-data", '{"approach": "\\ud800"}')
    refused(result, "invalid_submission", 2)
    assert koto.journal_path("job").read_bytes() == before


@pytest.mark.parametrize(
    "front",
    [
        "x: " + "[" * 10_000 + "]" * 10_000,
        "x: " + "{a: " * 3000 + "1" + "}" * 3000,
        "\n".join(" " * level + f"k{level}:" for level in range(1200)) + " 1",
        "x:\n" + "\n".join(" " * (2 * level + 2) + "- " for level in range(700)) + "1",
    ],
    ids=["flow-list", "flow-mapping", "block-mapping", "block-list"],
)
def test_item6_deeply_nested_template_yaml_is_template_error(koto: Koto, front: str) -> None:
    template = koto.write("deep.md", f"---\nname: deep\nversion: '1'\n{front}\n---\n## a\nA.\n")
    error = refused(koto("init", "d", "--template", str(template)), "template_error", 3)
    assert "nested more than 64 levels deep" in str(error["error"])
    refused(koto("template", "compile", str(template)), "template_error", 3)
    assert not koto.session_dir("d").exists()


VERBS = [
    ("status", "NAME"),
    ("next", "NAME"),
    ("next", "NAME", "--with-data", '{"approach": "a"}'),
    ("rewind", "NAME"),
    ("cancel", "NAME"),
    ("cancel", "NAME", "--cleanup"),
    ("context", "add", "NAME", "k", "--from-file", "/dev/null"),
    ("context", "get", "NAME", "k"),
    ("context", "exists", "NAME", "k"),
    ("context", "list", "NAME"),
    ("context", "remove", "NAME", "k"),
    ("decisions", "record", "NAME", "--with-data", '{"choice": "a", "rationale": "b"}'),
    ("decisions", "list", "NAME"),
    ("session", "dir", "NAME"),
    ("session", "cleanup", "NAME"),
    ("init", "NAME", "--template", "TEMPLATE", "--var", TASK),
]


@pytest.mark.parametrize("name", ["../x", "a/b", ".hidden", "x" * 190, "a~1", "new\nline"])
def test_item6_every_verb_refuses_an_invalid_name_alike(started: Koto, name: str) -> None:
    koto = started
    template = koto.template("lifecycle")
    for verb in VERBS:
        args = [template if a == "TEMPLATE" else name if a == "NAME" else a for a in verb]
        error = refused(koto(*args), "invalid_name", 2)
        message = error["message"] if "message" in error else error["error"]
        assert "invalid session name" in str(message), verb
    assert sorted(os.listdir(koto.home / "sessions")) == ["job"]


def test_item6_a_189_character_name_is_a_session(koto: Koto) -> None:
    name = "n" * 189  # its run id koto-NAME.state is kassette's longest, 200 characters
    koto.ok("init", name, "--template", koto.template("lifecycle"), "--var", TASK)
    assert koto.journal_path(name).exists()
    assert koto.ok("status", name)["current_state"] == "plan"


def test_item6_a_template_that_is_not_a_regular_file_or_too_big_is_refused(koto: Koto) -> None:
    fifo = koto.cwd / "fifo.md"
    os.mkfifo(fifo)
    big = koto.write("big.md", "---\nname: big\n---\n" + "x" * (1 << 20))
    for source, reason in [
        ("/dev/zero", "a template must be a regular file"),
        (str(fifo), "a template must be a regular file"),
        (str(koto.cwd), "a template must be a regular file"),
        (str(big), "larger than 1048576 bytes"),
        (str(koto.cwd / "missing.md"), "cannot read template"),
    ]:
        for args in (
            ("init", "t", "--template", source),
            ("template", "compile", source),
            ("template", "export", source),
        ):
            error = refused(koto(*args), "template_error", 3)
            assert reason in str(error["error"]), (args, error)
    refused(koto("template", "export", "/dev/zero.json"), "template_error", 3)
    assert not (koto.home / "sessions").exists()


def test_item7_an_export_that_cannot_be_written_is_one_json_error(koto: Koto) -> None:
    template = koto.template("lifecycle")
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)
    for target in ["/proc/nope/x.html", str(koto.cwd), "/dev/full"]:
        result = koto("template", "export", template, "--format", "html", "--output", target)
        error = refused(result, "output_error", 3)
        assert str(error["error"]).startswith(f"cannot write {target}: ")
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)  # written into, never renamed over
    fifo = koto.cwd / "diagram.fifo"
    os.mkfifo(fifo)
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE)
    assert koto.ok("template", "export", template, "--output", str(fifo))["output"] == str(fifo)
    assert reader.communicate(timeout=60)[0].startswith(b"stateDiagram-v2")
    written = koto.ok("template", "export", template, "--output", "diagram.mmd")
    assert written["output"] == str(koto.cwd / "diagram.mmd")
    assert (koto.cwd / "diagram.mmd").read_text().startswith("stateDiagram-v2")
    assert [p.name for p in koto.cwd.iterdir() if p.name.startswith(".")] == []


def test_item7_context_get_to_a_file_that_cannot_be_written_is_one_json_error(
    started: Koto,
) -> None:
    koto = started
    assert koto("context", "add", "job", "plan.md", input=b"the plan").code == 0
    result = koto("context", "get", "job", "plan.md", "--to-file", "/proc/nope/plan.md")
    refused(result, "output_error", 3)
    assert koto("context", "get", "job", "plan.md", "--to-file", "out/plan.md").code == 0
    assert (koto.cwd / "out" / "plan.md").read_bytes() == b"the plan"


@pytest.mark.parametrize("stdout", ["full", "closed"])
def test_item7_a_stdout_that_cannot_be_written_is_one_json_error_on_stderr(
    koto: Koto, stdout: str
) -> None:
    template = koto.template("lifecycle")
    for args in (("template", "export", template), ("template", "compile", template)):
        if stdout == "full":
            with open("/dev/full", "wb") as full:
                process = subprocess.run(
                    koto.command(*args), cwd=koto.cwd, env=koto.environment, stdout=full,
                    stderr=subprocess.PIPE, timeout=120,
                )  # fmt: skip
        else:
            process = subprocess.run(
                koto.command(*args), cwd=koto.cwd, env=koto.environment, stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE, timeout=120, pass_fds=(), close_fds=True,
                preexec_fn=lambda: os.close(1),
            )  # fmt: skip
        assert process.returncode == 3, process.stderr
        assert b"Traceback" not in process.stderr
        lines = process.stderr.decode().strip().splitlines()
        assert len(lines) == 1, lines
        assert '"code": "output_error"' in lines[0] and "cannot write to stdout" in lines[0]


def test_item6_a_missing_from_file_is_a_usage_error_not_a_traceback(started: Koto) -> None:
    koto = started
    result = koto("context", "add", "job", "k", "--from-file", str(Path("/nonexistent/x")))
    refused(result, "usage", 2)


# -- section 3: one of each --------------------------------------------------------------------

PACKAGE = Path(__file__).resolve().parents[2] / "kassette" / "koto"


def sources() -> dict[str, str]:
    return {path.name: path.read_text() for path in sorted(PACKAGE.glob("*.py"))}


def test_section3_koto_has_one_store_class_over_either_backend(tmp_path: Path) -> None:
    import ast

    from kassette.koto._config import Config
    from kassette.koto._store import Sessions, open_store
    from kassette.storage import ObjectStorage
    from kassette.storage._local import LocalStorage

    classes = {
        name: [n.name for n in ast.walk(ast.parse(text)) if isinstance(n, ast.ClassDef)]
        for name, text in sources().items()
    }
    assert classes["_store.py"] == ["Sessions"] and classes["_s3store.py"] == []
    local = open_store(tmp_path, Config({}, {}))
    assert type(local) is Sessions and isinstance(local.objects, LocalStorage)
    assert isinstance(local.objects, ObjectStorage)


def test_section3_one_atomic_write_one_variable_pattern_one_error_conversion() -> None:
    texts = sources()
    for name, text in texts.items():  # files are written by kassette.storage._local.replace_file
        assert "os.replace(" not in text and "fsync" not in text, name
        assert "except KassetteError" not in text or "from_kassette" in text, name
    patterns = [name for name, text in texts.items() if r"\{\{" in text]
    assert patterns == ["_gates.py"], patterns
    validators = [name for name, text in texts.items() if "def validate_name" in text]
    assert validators == ["_names.py"]
    assert (
        "_translate" not in texts["_session.py"] and "_infrastructure" not in texts["_session.py"]
    )


@pytest.mark.parametrize(
    "value",
    ["1" * 5000, "-" + "9" * 4301, "0x" + "f" * 20_000, "1e999"],
    ids=["5,000 digits", "4,302 digits negative", "hex of 80,000 bits", "float overflow"],
)
def test_a_number_too_large_in_front_matter_is_template_error(koto: Koto, value: str) -> None:
    """Adversarial 6: a 5,000-digit integer gave `internal_error` with a traceback."""
    template = koto.write("big.md", f"---\nname: big\nversion: '1'\nx: {value}\n---\n## a\nA.\n")
    error = refused(koto("template", "compile", str(template)), "template_error", 3)
    assert "big.md:4: " in str(error["error"])
    refused(koto("init", "b", "--template", str(template)), "template_error", 3)
    assert not koto.session_dir("b").exists()
