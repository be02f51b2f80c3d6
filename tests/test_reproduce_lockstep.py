"""``benchmarks/fts_lockstep.py``: the reproduction's lock-step federation gives ``simulate()``'s
results bit for bit (every agent's points and values, the uploads' norms, the DP counters and
epsilon) on small federations of every kind it runs, and leaves the others to ``simulate()``."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
import sys

import numpy as np
import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import federation_synthetic as fs  # noqa: E402
import fts_lockstep as lockstep  # noqa: E402

from optuna_fedbo.federation import FTSConfig  # noqa: E402
from optuna_fedbo.federation import presets  # noqa: E402
from optuna_fedbo.federation.dp_config import DPConfig  # noqa: E402

_DE = presets.fts_de_synthetic()
#: (protocol, privacy, scale of the values): values x20 make the server clip uploads to the
#: model's norm bound and the incumbent win its sub-region's search.
_CASES = {
    "FTS-DE P=2": (_DE, None),
    "FTS-DE P=2, values x20": (_DE, None, 20.0),
    "FTS-DE P=3, whole domain, per-participant standardization": (
        replace(_DE, n_subregions=3, init_in_subregion=False, normalization="participant"),
        None,
    ),
    "FTS-DE P=2, 1-p_t=1/t": (replace(_DE, schedule="1-1/t"), None),
    "FTS (P=1)": (presets.modified_fts_synthetic(), None),
    "FTS, relayed vectors": (presets.fts_synthetic(), None),
    "DP-FTS-DE": (_DE, DPConfig(noise_multiplier=1.0, sample_rate=0.5, clip_norm=3.0)),
    "DP-FTS": (
        presets.modified_fts_synthetic(),
        DPConfig(noise_multiplier=1.2, sample_rate=0.25, clip_norm=11.0, accountant="moments"),
    ),
}


def _observed(result: lockstep.LockstepResult) -> tuple[object, ...]:
    return (
        result.f_values,
        [(r.round, r.n_contributors, r.n_clipped, r.upload_norms) for r in result.reports],
        result.dp_counters(),
    )


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("case", sorted(_CASES))
def test_lockstep_is_simulate_bit_for_bit(case: str) -> None:
    protocol, privacy, scale = (*_CASES[case], 1.0)[:3]
    functions = scale * fs.homogeneous(5, np.random.default_rng(3), 0.02)
    assert lockstep.supports(protocol)
    fast = lockstep.run_lockstep(functions, 4, 3, protocol, privacy, 77)
    slow = fs.run_federated(functions, 4, 3, protocol, privacy, 77)
    published = [r for r in slow.reports if r.published]
    expected = (
        fs.f_values_of(slow.studies),
        [(r.round, r.n_contributors, r.n_clipped, r.upload_norms) for r in slow.reports],
        {
            "clipped": sum(r.n_clipped or 0 for r in published),
            "contributed": sum(r.n_contributors for r in published),
            "epsilon": slow.federation.privacy_spent()[0],
        },
    )
    assert _observed(fast) == expected
    assert len(fast.reports) == 4 and all(len(f) == protocol.n_init + 4 for f in fast.f_values)


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_protocol_it_does_not_run_goes_through_simulate() -> None:
    defaults = FTSConfig(n_subregions=2, n_init=3)  # pooled statistics, a local GP per site
    assert not lockstep.supports(defaults)
    with pytest.raises(ValueError, match="use simulate"):
        lockstep.run_lockstep(np.zeros((2, fs.GRID)), 1, 0, defaults)
    functions = fs.homogeneous(3, np.random.default_rng(5), 0.02)
    result = lockstep.run(functions, 2, 5, defaults)
    expected = fs.f_values_of(fs.run_federated(functions, 2, 5, defaults).studies)
    assert result.f_values == expected and [r.round for r in result.reports] == [0, 1]
