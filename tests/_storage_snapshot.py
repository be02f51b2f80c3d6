"""Everything in an Optuna storage, to assert that a refused operation wrote nothing."""

from __future__ import annotations

from typing import Any

from optuna.storages import BaseStorage


def snapshot(storage: BaseStorage) -> list[Any]:
    """Studies, their attributes, their trials' numbers, states and attributes, sorted."""
    out = []
    for study in storage.get_all_studies():
        trials = storage.get_all_trials(study._study_id, deepcopy=False)
        out.append(
            (
                study.study_name,
                sorted(study.system_attrs.items()),
                [(t.number, t.state, sorted(t.system_attrs.items())) for t in trials],
            )
        )
    return sorted(out, key=lambda item: item[0])
