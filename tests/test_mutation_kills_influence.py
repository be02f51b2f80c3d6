"""What a federation without differential privacy warns about (``federation/fts/influence.py``),
in process: each exposure of an upload, in full, pointed at the caller's ``Federation.create``
line, and no warning where nothing is exposed (written to kill mutants of
``benchmarks/mutation_trust.py``)."""

from __future__ import annotations

import inspect
import warnings

from optuna.distributions import FloatDistribution
import pytest

from optuna_fedbo.federation import Federation
from optuna_fedbo.federation import FTSConfig

FIX = "; use privacy=DPConfig(...) to protect the uploads, or the default aggregation='pooled'."
LONE = (
    "Without differential privacy, min_contributors=1 publishes a round of one contributor: its "
    "upload's model, readable by anyone with the storage URL" + FIX
)
SAMPLE = (
    "Without differential privacy, aggregation='sample' (the original FTS) publishes every "
    "participant's vector as it is (in an order secret to the server)" + FIX
)
WEIGHTED = (
    "Without differential privacy, aggregation='weighted' with {} sub-regions publishes one "
    "public mixture of the vectors per sub-region, with public weights, which give each "
    "contributor's vector while there are no more contributors than sub-regions" + FIX
)


def _create(n_clients: int = 2, **protocol) -> list[warnings.WarningMessage]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        Federation.create(
            f"influence-kills-{len(protocol)}-{sorted(protocol.items())}",
            search_space={"x": FloatDistribution(0.0, 1.0)},
            n_clients=n_clients,
            protocol=FTSConfig(n_features=4, n_init=1, **protocol),
        )
    return [w for w in caught if issubclass(w.category, UserWarning)]


@pytest.mark.parametrize(
    ("n_clients", "protocol", "expected"),
    [
        (1, {"min_contributors": 1}, [LONE]),
        (2, {"aggregation": "sample"}, [SAMPLE]),
        (2, {"aggregation": "weighted", "n_subregions": 3}, [WEIGHTED.format(3)]),
        (2, {"aggregation": "weighted", "n_subregions": 2}, [WEIGHTED.format(2)]),
        (2, {"aggregation": "sample", "min_contributors": 1}, [LONE, SAMPLE]),
        (2, {"aggregation": "weighted", "n_subregions": 1}, []),  # one public mixture: the mean
        (2, {}, []),
    ],
)
def test_each_exposure_warns_in_full_and_nothing_else_does(n_clients, protocol, expected) -> None:
    assert [str(w.message) for w in _create(n_clients, **protocol)] == expected


def test_the_warning_points_at_the_callers_create_line() -> None:
    # (Not run by benchmarks/mutation_trust.py: mutmut's trampolines add frames to the stack.)
    (caught,) = _create(2, aggregation="sample")
    lines, first = inspect.getsourcelines(_create)
    # The user's Federation.create call (in _create), not the library nor the caller's caller.
    assert caught.filename == __file__ and first <= caught.lineno < first + len(lines)
