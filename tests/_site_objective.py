"""What the site tests share: a two-parameter objective and the warnings a site logged."""

from __future__ import annotations

import logging

import optuna
import pytest


def objective(trial: optuna.Trial) -> float:
    """A smooth objective of ``x`` and ``y`` in [0, 1] (maximum at ``x = 0.3, y = 0``)."""
    return -((trial.suggest_float("x", 0, 1) - 0.3) ** 2) - trial.suggest_float("y", 0, 1)


def warnings_with(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    """The WARNING messages captured by ``caplog`` that contain ``text``."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and text in r.getMessage()
    ]
