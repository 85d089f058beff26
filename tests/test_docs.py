"""The documentation cannot drift from the code.

Every ```python block in README.md, docs/*.md and examples/README.md either appears verbatim in
a file under examples/ (which tests/test_examples.py runs and checks) or is a complete program
that runs in an empty directory. A block fenced as ```<lang> output right after a python block
is that program's exact stdout (durations, which differ run to run, excepted). Every
```console block of README.md and docs/cli.md is a transcript of the real `kassette` command:
each `$ COMMAND` runs in bash, and what it prints (stdout and stderr) is the lines after it;
README.md's against the run its program before it made, docs/cli.md's against a fresh copy of
the store `tests/docs_store.py` builds. Relative links resolve.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    ROOT / "examples" / "README.md",
]
EXAMPLES = {path: path.read_text() for path in sorted((ROOT / "examples").glob("*.py"))}
_FENCE = re.compile(r"^(\s*)(`{3,})(.*)$")
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_DURATION = re.compile(r'"durationMs":[0-9.eE+-]+')


@dataclass(frozen=True)
class Block:
    document: Path
    opening: int  # index of the opening fence's line
    closing: int  # index of the closing fence's line
    info: str
    text: str

    @property
    def language(self) -> str:
        return self.info.split()[0] if self.info else ""

    def __str__(self) -> str:
        return f"{self.document.relative_to(ROOT)}:{self.opening + 1}"


def fenced_blocks(document: Path) -> list[Block]:
    blocks: list[Block] = []
    lines = document.read_text().splitlines()
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        index += 1
        if opening is None:
            continue
        indent, fence, info = opening.groups()
        start = index
        while index < len(lines) and lines[index].strip() != fence:
            index += 1
        body = "\n".join(line[len(indent) :] for line in lines[start:index])
        text = textwrap.dedent(body) + "\n"
        blocks.append(Block(document, start - 1, index, info.strip(), text))
        index += 1
    return blocks


BLOCKS = [block for document in DOCUMENTS for block in fenced_blocks(document)]
PYTHON = [block for block in BLOCKS if block.language == "python"]
CONSOLE = [
    block
    for block in BLOCKS
    if block.language == "console" and block.document.name in ("README.md", "cli.md")
]
_STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def expected_output(block: Block) -> Block | None:
    """The `... output` block that follows `block` with nothing but blank lines between."""
    following = [b for b in BLOCKS if b.document == block.document and b.opening > block.closing]
    if not following or not following[0].info.endswith(" output"):
        return None
    lines = block.document.read_text().splitlines()
    between = lines[block.closing + 1 : following[0].opening]
    return following[0] if all(not line.strip() for line in between) else None


def in_examples(block: Block) -> bool:
    return any(block.text.strip() in text for text in EXAMPLES.values())


def run_program(text: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    program = cwd / "program.py"
    program.write_text(text)
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    environment.pop("KASSETTE_STORAGE", None)
    return subprocess.run(
        [sys.executable, program.name],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize("block", PYTHON, ids=str)
def test_python_block_is_an_example_or_runs(block: Block, tmp_path: Path) -> None:
    output = expected_output(block)
    if output is None and in_examples(block):
        return
    done = run_program(block.text, tmp_path)
    assert done.returncode == 0, f"{block} does not run:\n{done.stderr}"
    if output is not None:
        assert _DURATION.sub('"durationMs":…', done.stdout) == _DURATION.sub(
            '"durationMs":…', output.text
        ), f"{output} is not what {block} prints"


def test_readme_starts_with_the_two_commands() -> None:
    first = next(block for block in BLOCKS if block.document.name == "README.md")
    commands = [line.split("#")[0].strip() for line in first.text.splitlines()]
    assert [c for c in commands if c] == ["make demo", "make test"]


def test_readme_quickstart_is_examples_quickstart() -> None:
    readme = [block for block in PYTHON if block.document.name == "README.md"]
    quickstart = EXAMPLES[ROOT / "examples" / "quickstart.py"]
    assert any("@kassette(" in b.text and b.text.strip() in quickstart for b in readme)


def test_ci_runs_the_readme_test_command() -> None:
    script = (ROOT / ".ci" / "run").read_text()
    assert script.startswith("#!/usr/bin/env bash\n")
    assert "set -euo pipefail" in script
    assert re.search(r"^make test$", script, re.MULTILINE)


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda d: str(d.relative_to(ROOT)))
def test_relative_links_resolve(document: Path) -> None:
    for target in _LINK.findall(document.read_text()):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = (document.parent / target.split("#")[0]).resolve()
        assert path.exists(), f"{document.name} links to missing {target}"


def test_the_reference_names_every_public_name() -> None:
    import kassette

    reference = (ROOT / "docs" / "reference.md").read_text()
    missing = [n for n in kassette.__all__ if not re.search(rf"`{re.escape(n)}[`(]", reference)]
    assert missing == [], f"docs/reference.md does not mention {missing}"


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_make_demo_installs_only_the_package() -> None:
    """The demo needs only the standard library: no extra (the dev one takes minutes)."""
    run = [shutil.which("make") or "make", "-n", "-B", "-C", str(ROOT)]
    demo = subprocess.run([*run, "demo"], capture_output=True, text=True, check=True, timeout=60)
    installs = [line for line in demo.stdout.splitlines() if "pip install" in line]
    assert installs and all("[" not in line for line in installs), demo.stdout
    assert "examples/demo.py" in demo.stdout
    test = subprocess.run([*run, "test"], capture_output=True, text=True, check=True, timeout=60)
    assert '-e ".[dev]"' in test.stdout


def transcript(block: Block) -> list[tuple[str, str]]:
    """Each `$ COMMAND` of a console block and the lines printed after it."""
    steps: list[tuple[str, str]] = []
    for line in block.text.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], ""))
        else:
            assert steps, f"{block} prints before its first command"
            command, printed = steps[-1]
            steps[-1] = (command, printed + line + "\n")
    return steps


def run_transcript(commands: list[str], cwd: Path) -> list[str]:
    """What each command prints (stdout and stderr) when they run in one bash, one after the
    other, with `kassette` and `python` this interpreter's."""
    shims = cwd / "bin"
    shims.mkdir()
    for name, run in (("kassette", f'"{sys.executable}" -m kassette'), ("python", sys.executable)):
        (shims / name).write_text(f'#!/bin/sh\nexec {run} "$@"\n')
        (shims / name).chmod(0o755)
    marker = "@@@ next command @@@"
    script = "".join(f"echo '{marker}'\n{command} 2>&1\n" for command in commands)
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    environment["PATH"] = f"{shims}{os.pathsep}{environment.get('PATH', '')}"
    environment.pop("KASSETTE_STORAGE", None)
    done = subprocess.run(
        ["bash", "-c", script],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )
    printed = done.stdout.split(marker + "\n")
    assert printed[0] == "" and len(printed) == len(commands) + 1, done.stdout + done.stderr
    return printed[1:]


@pytest.mark.parametrize("block", CONSOLE, ids=str)
def test_console_block_is_what_the_real_command_prints(block: Block, tmp_path: Path) -> None:
    text = block.text
    if block.document.name == "README.md":  # the run the program just before it made
        program = [b for b in PYTHON if b.document == block.document and b.closing < block.opening]
        assert run_program(program[-1].text, tmp_path).returncode == 0
        (made,) = (path.stem for path in (tmp_path / ".kassette").glob("*.jsonl"))
        shown = re.search(r"^\$ RUN=(\w+)$", text, re.MULTILINE)
        assert shown is not None, f"{block} does not name its run"
        text = text.replace(shown.group(1), made)
    else:
        sys.path.insert(0, str(ROOT / "tests"))
        try:
            import docs_store
        finally:
            sys.path.remove(str(ROOT / "tests"))
        docs_store.build(tmp_path / ".kassette")
    steps = transcript(Block(block.document, block.opening, block.closing, block.info, text))
    printed = run_transcript([command for command, _ in steps], tmp_path)
    for (command, expected), actual in zip(steps, printed, strict=True):
        normal = [_DURATION.sub('"durationMs":…', _STAMP.sub("…", x)) for x in (expected, actual)]
        assert normal[1] == normal[0], f"{block}: `{command}` printed\n{actual}"
