"""Every jq command in skills/kassette/SKILL.md and docs/operations.md runs, as written,
against fixture journals.

The fixture is a storage directory of five runs written with a fake clock (so timestamps are
fixed): INC-7 completed after an approval, INC-8 suspended, INC-9 failed in apply-fix,
INC-9-retry a fork of it (cut at its error) that completed, INC-10 crashed mid-run. Each ```sh
block that uses jq runs in bash (`set -euo pipefail`) in a directory holding a fresh copy as
`.kassette/`, with `kassette` on PATH, `KASSETTE_STORAGE=file:.kassette` and `RUN=INC-7`. It
must exit 0 with nothing on stderr; a ```text output block right after it is its exact stdout,
and a block without one must print something.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_docs import Block, fenced_blocks

from kassette import Context, LocalStorage, Retry, kassette, open_run
from kassette.core import read_journal
from kassette.testing import FakeClock

ROOT = Path(__file__).resolve().parent.parent
SKILL = ROOT / "skills" / "kassette" / "SKILL.md"
DOCUMENTS = [SKILL, ROOT / "docs" / "operations.md"]
BLOCKS = [block for document in DOCUMENTS for block in fenced_blocks(document)]
JQ_BLOCKS = [b for b in BLOCKS if b.language == "sh" and "jq " in b.text]


def expected_output(block: Block) -> Block | None:
    """The `text output` block right after `block`, with only blank lines between."""
    following = [b for b in BLOCKS if b.document == block.document and b.opening > block.closing]
    if not following or following[0].info != "text output":
        return None
    lines = block.document.read_text().splitlines()
    between = lines[block.closing + 1 : following[0].opening]
    return following[0] if all(not line.strip() for line in between) else None


def write_fixture(directory: Path) -> None:
    clock = FakeClock()
    storage = LocalStorage(directory)
    flaky = {"calls": 0}

    def analyze() -> dict[str, object]:
        flaky["calls"] += 1
        if flaky["calls"] == 1:
            raise TimeoutError("the model timed out")  # retried once, in-process
        return {"cause": "null cart id", "risky": True}

    def make(fail_fix: bool = False) -> object:
        def fix() -> str:
            if fail_fix:
                raise RuntimeError("deploy failed: cluster unreachable")
            return "deployed"

        @kassette(storage=storage, version="triage-v1", clock=clock)
        def triage(ctx: Context, ticket: dict[str, int]) -> dict[str, object]:
            facts = ctx.step("read-ticket", lambda: {"id": ticket["id"], "errors": 1312})
            ctx.step("analyze", analyze, retry=Retry(max_attempts=2, delay=1.0))
            approval = ctx.suspend("human-approval", timeout=86400, reason="touches production")
            if not approval["approved"]:
                return {"outcome": "rejected"}
            return {"outcome": ctx.step("apply-fix", fix), "errors": facts["errors"]}

        return triage

    triage, broken = make(), make(fail_fix=True)
    triage.start({"id": 7}, run_id="INC-7")  # type: ignore[attr-defined]
    clock.advance(60)
    triage.resume("INC-7", "human-approval", {"approved": True, "by": "sam"})  # type: ignore[attr-defined]
    clock.advance(60)
    triage.start({"id": 8}, run_id="INC-8")  # type: ignore[attr-defined]
    clock.advance(60)
    broken.start({"id": 9}, run_id="INC-9")  # type: ignore[attr-defined]
    clock.advance(60)
    broken.resume("INC-9", "human-approval", {"approved": True, "by": "kim"})  # type: ignore[attr-defined]
    clock.advance(60)
    failed_at = read_journal(storage, "INC-9").entries[-1]["offset"]  # its error entry
    triage.fork("INC-9", offset=failed_at, new_run_id="INC-9-retry")  # type: ignore[attr-defined]
    clock.advance(60)
    with open_run(storage, "INC-10", input={"id": 10}, version="triage-v1", clock=clock) as run:
        run.record("read-ticket", lambda: {"id": 10, "errors": 3})  # then the process died


@pytest.fixture(scope="module")
def fixture_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("skill") / "runs"
    write_fixture(directory)
    return directory


def test_the_skill_has_jq_commands_and_a_front_matter() -> None:
    text = SKILL.read_text()
    assert text.startswith("---\nname: kassette\ndescription: ")
    skill = [block for block in JQ_BLOCKS if block.document == SKILL]
    assert len(skill) >= 8
    assert sum(block.text.count("jq ") for block in skill) >= 20


@pytest.mark.skipif(shutil.which("jq") is None, reason="jq is not installed (.ci/run installs it)")
@pytest.mark.parametrize("block", JQ_BLOCKS, ids=str)
def test_jq_block_runs_against_the_fixture(
    block: Block, fixture_runs: Path, tmp_path: Path
) -> None:
    shutil.copytree(fixture_runs, tmp_path / ".kassette")
    environment = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(ROOT),
        "KASSETTE_STORAGE": "file:.kassette",
        "RUN": "INC-7",
    }
    done = subprocess.run(
        ["bash", "-c", "set -euo pipefail\n" + block.text],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"{block} failed:\n{done.stderr}"
    assert done.stderr == "", f"{block} wrote to stderr:\n{done.stderr}"
    output = expected_output(block)
    if output is None:
        assert done.stdout.strip(), f"{block} printed nothing"
    else:
        assert done.stdout == output.text, f"{output} is not what {block} prints"
