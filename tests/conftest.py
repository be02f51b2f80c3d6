"""Shared fixtures."""

from __future__ import annotations

import optuna
import pytest


@pytest.fixture
def propagate():
    """Let ``caplog`` see Optuna's (and optuna-fedbo's) log records during a test."""
    optuna.logging.enable_propagation()
    yield
    optuna.logging.disable_propagation()
