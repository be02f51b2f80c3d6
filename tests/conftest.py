"""Shared test set-up: a private key directory, and a fixture for Optuna's logs in ``caplog``.

The key directory is set at import (before the test modules snapshot ``os.environ`` for their
worker processes), so tests never touch the user's keys and the processes they start find the
same keys; it is removed when the session ends.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import optuna
import pytest

KEY_HOME = tempfile.mkdtemp(prefix="optuna-fedbo-test-keys-")
os.environ["OPTUNA_FEDBO_HOME"] = KEY_HOME


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Remove the session's key directory (the tests leave nothing in the temp dir)."""
    shutil.rmtree(KEY_HOME, ignore_errors=True)


@pytest.fixture
def propagate():
    """Let ``caplog`` see Optuna's (and optuna-fedbo's) log records during a test."""
    optuna.logging.enable_propagation()
    yield
    optuna.logging.disable_propagation()
