"""Fixtures for koto's black-box tests: the `koto` command run as a real process.

Every test gets a fresh HOME and KOTO_HOME and a project directory to run in; `koto(...)` runs
`python -m kassette.koto._cli` there and returns the exit code, stdout, stderr and the JSON on
stdout's last line. Templates the tests use are tiny files in tests/koto/templates/.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

TEMPLATES = Path(__file__).parent / "templates"
PROJECT_ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 120  # seconds for one koto process, far above what any test needs


@dataclass
class Result:
    code: int
    stdout: bytes
    stderr: bytes

    @property
    def json(self) -> Any:
        """The JSON value on stdout's last line (koto prints one per call)."""
        lines = self.stdout.decode().strip().splitlines()
        assert lines, f"no output (exit {self.code}); stderr: {self.stderr.decode()}"
        return json.loads(lines[-1])

    @property
    def error(self) -> Any:
        """The `error` of a JSON error answer."""
        return self.json["error"]


class Koto:
    """Runs `koto` as a process with its own HOME, KOTO_HOME and working directory."""

    def __init__(self, root: Path, home: Path | None = None) -> None:
        self.root = root
        self.home = home or root / "koto-home"  # not HOME/.koto: the default is tested apart
        self.cwd = root / "project"
        self.cwd.mkdir(parents=True, exist_ok=True)
        self.environment = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("KOTO_", "AWS_")) and key not in ("HOME",)
        }
        self.environment.update(HOME=str(root / "home"), KOTO_HOME=str(self.home))
        # `python` in gate commands is this interpreter
        self.environment["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}" + os.environ.get(
            "PATH", ""
        )
        self.environment["PYTHONPATH"] = str(PROJECT_ROOT)

    def command(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "kassette.koto._cli", *args]

    def __call__(self, *args: str, input: bytes | None = None, **environment: str) -> Result:
        return self.at(self.cwd, *args, input=input, **environment)

    def at(
        self, directory: Path, *args: str, input: bytes | None = None, **environment: str
    ) -> Result:
        """Run `koto` in `directory` instead of the project directory."""
        process = subprocess.run(
            self.command(*args),
            cwd=directory,
            env={**self.environment, **environment},
            input=input,
            capture_output=True,
            timeout=TIMEOUT,
        )
        return Result(process.returncode, process.stdout, process.stderr)

    def ok(self, *args: str, **environment: str) -> Any:
        """Run and require exit 0; the JSON answer."""
        result = self(*args, **environment)
        assert result.code == 0, (result.code, result.stdout, result.stderr)
        return result.json

    def start(self, *args: str, **environment: str) -> subprocess.Popen[bytes]:
        """Start `koto` without waiting for it."""
        return subprocess.Popen(
            self.command(*args),
            cwd=self.cwd,
            env={**self.environment, **environment},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )

    def template(self, name: str) -> str:
        """Copy tests/koto/templates/NAME.md into the project; its path, for --template."""
        target = self.cwd / f"{name}.md"
        shutil.copyfile(TEMPLATES / f"{name}.md", target)
        return str(target)

    def write(self, relative: str, text: str) -> Path:
        path = self.cwd / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def session_dir(self, name: str) -> Path:
        return self.home / "sessions" / name

    def journal_path(self, name: str) -> Path:
        """The session's journal file: upstream's `koto-NAME.state.jsonl`."""
        return self.session_dir(name) / f"koto-{name}.state.jsonl"

    def journal(self, name: str) -> list[dict[str, Any]]:
        """The session's journal entries, read straight from the file."""
        return [json.loads(line) for line in self.journal_path(name).read_text().splitlines()]

    def entries(self, name: str, kind: str) -> list[dict[str, Any]]:
        return [entry for entry in self.journal(name) if entry["type"] == kind]


@pytest.fixture
def koto(tmp_path: Path) -> Koto:
    return Koto(tmp_path)
