"""Fixtures for driving executors against a real `AgentStep` (no engine, no mocks)."""

from __future__ import annotations

import pytest
from executor_cases import MakeStep, new_case
from fakes.openai_server import openai_server as openai_server


@pytest.fixture
def make_step() -> MakeStep:
    return new_case
