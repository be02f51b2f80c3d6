"""Every OptunaHub package under samplers/ loads with optunahub and runs a short study."""

from __future__ import annotations

from pathlib import Path

import optuna
import optunahub
import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
FRONT_MATTER_KEYS = ("author:", "title:", "description:", "tags:", "optuna_versions:", "license:")


def test_rff_thompson_package_loads_and_optimizes() -> None:
    module = optunahub.load_local_module(
        package="samplers/rff_thompson", registry_root=str(REPO_ROOT)
    )
    study = optuna.create_study(sampler=module.RFFThompsonSampler(n_startup_trials=3, seed=0))
    study.optimize(lambda t: (t.suggest_float("x", -5, 5) - 1) ** 2, n_trials=8)
    assert len(study.trials) == 8


@pytest.mark.parametrize(
    "package", sorted(p.name for p in (REPO_ROOT / "samplers").iterdir() if p.is_dir())
)
def test_package_layout(package: str) -> None:
    root = REPO_ROOT / "samplers" / package
    for name in ("__init__.py", "README.md", "LICENSE"):
        assert (root / name).is_file(), f"{package} lacks {name}"
    readme = (root / "README.md").read_text()
    assert readme.startswith("---\n")
    front_matter = readme.split("---\n")[1]
    for key in FRONT_MATTER_KEYS:
        assert key in front_matter, f"{package}/README.md front matter lacks {key}"
    assert "sampler" in front_matter.split("tags:")[1].splitlines()[0]
    assert "MIT" in (root / "LICENSE").read_text()
