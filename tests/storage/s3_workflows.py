"""What the S3 backend's tests run and check, shared by test_s3.py and test_s3_chunks.py: a
five-step workflow (plain, and counting how often each step runs), its result, and the checks
on a journal and on a bucket's keys."""

from __future__ import annotations

from typing import Any

from kassette._journal import Journal

STEPS = ["fetch", "parse", "plan", "build", "ship"]
EXPECTED = {"last": "ship<build<plan<parse<fetch<None"}
"""What `pipeline` returns: each step records its name and the step before it."""


def pipeline(ctx: Any, input: Any) -> dict[str, Any]:
    """Five steps; each records its name and the step before it."""
    previous = None
    for name in STEPS:
        previous = ctx.step(name, lambda name=name, previous=previous: f"{name}<{previous}")
    return {"last": previous}


def counted_pipeline(calls: dict[str, int]) -> Any:
    """`pipeline`, counting in `calls` how many times each step's function runs."""

    def workflow(ctx: Any, input: Any) -> dict[str, Any]:
        previous = None
        for name in STEPS:

            def step(name: str = name, previous: Any = previous) -> str:
                calls[name] = calls.get(name, 0) + 1
                return f"{name}<{previous}"

            previous = ctx.step(name, step)
        return {"last": previous}

    return workflow


def assert_sound(journal: Journal) -> None:
    """Dense offsets, sessions that never go back, and no step journaled twice."""
    entries = journal.entries
    assert [e["offset"] for e in entries] == list(range(len(entries)))
    sessions = [e["session"] for e in entries]
    assert sessions == sorted(sessions)
    step_ids = [e["stepId"] for e in entries if e["type"] == "step"]
    assert len(step_ids) == len(set(step_ids))


def object_keys(client: Any, bucket: str) -> list[str]:
    """Every key in `bucket`, sorted (all pages)."""
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
    return sorted(item["Key"] for page in pages for item in page.get("Contents", []))
