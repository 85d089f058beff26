"""The store docs/cli.md's transcripts show: `tests/test_docs.py` runs each of them against a
fresh copy, so every `$ kassette ...` there prints what the real command prints."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kassette import LocalStorage, kassette
from kassette.core import cancel_run, fork_run
from kassette.testing import FakeClock


def build(directory: Path) -> None:
    """INC-1 to INC-4 (completed, suspended on `human-approval`, completed, failed), forks of
    INC-1 and INC-3 (one running, one completed, one canceled), and `lost-branch`, a fork
    whose source `deleted-run` was deleted. One second apart, oldest first."""
    storage = LocalStorage(directory)
    clock = FakeClock(1_777_885_921.114)  # 2026-05-04T09:12:01.114Z

    def triage(ctx: Any, incident: dict[str, Any]) -> dict[str, Any]:
        analysis = ctx.step("analyze", lambda: f"{incident['host']}: disk full")
        if incident.get("approval"):
            ctx.suspend("human-approval")
        ctx.step("apply-fix", lambda: f"purged old logs ({analysis})")
        return {"outcome": "resolved"}

    def crashes(ctx: Any, incident: dict[str, Any]) -> None:
        ctx.step("analyze", lambda: "no such host")
        raise RuntimeError(f"cannot reach {incident['host']}")

    workflow = kassette(triage, storage=storage, version="triage-v1", clock=clock)
    workflow.start({"host": "db-1"}, run_id="INC-1")
    clock.advance(1)
    workflow.start({"host": "db-2", "approval": True}, run_id="INC-2")
    clock.advance(1)
    workflow.start({"host": "web-3"}, run_id="INC-3")
    clock.advance(1)
    kassette(crashes, storage=storage, version="triage-v1", clock=clock).start(
        {"host": "gw-4"}, run_id="INC-4"
    )
    clock.advance(1)
    workflow.fork("INC-1", step="apply-fix", new_run_id="INC-1-retry")
    clock.advance(1)
    fork_run(storage, "INC-3", offset=1, new_run_id="INC-3-early", clock=clock)
    clock.advance(1)
    workflow.fork("INC-3", step="apply-fix", new_run_id="INC-3-retry")
    clock.advance(1)
    fork_run(storage, "INC-3-retry", offset=2, new_run_id="INC-3-retry-2", clock=clock)
    cancel_run(storage, "INC-3-retry-2", "superseded", clock=clock)
    clock.advance(1)
    workflow.start({"host": "tmp-9"}, run_id="deleted-run")
    fork_run(storage, "deleted-run", offset=2, new_run_id="lost-branch", clock=clock)
    (directory / "deleted-run.jsonl").unlink()
