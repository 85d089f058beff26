"""Fixtures of the tests that drive the real SDKs against kassette's fake model server: the
server, an OpenAI and an Anthropic client on it (closed after the test), and `Crash`. A test
module imports the ones it uses by their functions' names
(`from model_fixtures import Crash, gpt_fixture, server_fixture`), as `workflow_support` does."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from anthropic import Anthropic
from openai import OpenAI

from kassette.testing import FakeModelServer, fake_model_server


class Crash(BaseException):
    """Stands in for the process dying after a call: nothing more is journaled."""


@pytest.fixture(name="server")
def server_fixture() -> Iterator[FakeModelServer]:
    with fake_model_server() as fake:
        yield fake


@pytest.fixture(name="gpt")
def gpt_fixture(server: FakeModelServer) -> Iterator[OpenAI]:
    with OpenAI(api_key="k", base_url=server.openai_base_url, max_retries=0) as sdk:
        yield sdk


@pytest.fixture(name="claude")
def claude_fixture(server: FakeModelServer) -> Iterator[Anthropic]:
    with Anthropic(api_key="k", base_url=server.anthropic_base_url, max_retries=0) as sdk:
        yield sdk
