"""Fixtures for the OpenAI integration: a fake OpenAI-compatible server and real SDK clients."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fake_openai_server import FakeOpenAI
from openai import AsyncOpenAI, OpenAI


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI().start()
    yield fake
    fake.stop()


@pytest.fixture
def client(server: FakeOpenAI) -> Iterator[OpenAI]:
    with OpenAI(api_key="test-key", base_url=server.base_url, max_retries=0, timeout=30) as sdk:
        yield sdk


@pytest.fixture
def async_client(server: FakeOpenAI) -> AsyncOpenAI:
    return AsyncOpenAI(api_key="test-key", base_url=server.base_url, max_retries=0, timeout=30)
