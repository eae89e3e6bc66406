"""Fixtures shared by the test modules."""

import pytest
from bot_support import FakeSlack


@pytest.fixture
def fake():
    """The fake Slack Web API on loopback (real HTTP, Slack's wire format); closed after the test."""
    f = FakeSlack()
    yield f
    f.close()
