"""The servers' poll loop: a round the participants' last uploads completed is published before
serving ends, however their uploads and their finishing interleave with the loop's reads."""

from __future__ import annotations

from collections.abc import Callable

from optuna_fedbo.federation._polling import poll_rounds
from optuna_fedbo.federation._serve_watch import ServeEnd


class _Federation:
    """Two rounds of 2 uploads; the last participant uploads round 1 and finishes between the
    server's read of the uploads (``step``) and its read of the participants' states
    (``check``), as happened under load on PostgreSQL in CI."""

    def __init__(self) -> None:
        self.uploads = {0: 2, 1: 1}
        self.published: list[int] = []
        self.finished = False

    def step(self) -> int | None:
        round_index = len(self.published)
        if round_index in self.uploads and self.uploads[round_index] == 2:
            self.published.append(round_index)
            return round_index
        return None

    def check(self) -> ServeEnd | None:
        if not self.finished:  # the last upload and the finish, both after the step's read
            self.uploads[1] = 2
            self.finished = True
        return ServeEnd("every participant has finished: serving ends", True)


def _poll(step: Callable[[], int | None], watch: object, ends: list[ServeEnd]) -> list[int]:
    return poll_rounds(
        step,
        lambda: None,
        done=lambda: False,
        poll_interval=0.0,
        timeout=10.0,
        stop=None,
        callback=None,
        max_consecutive_errors=1,
        watch=watch,  # type: ignore[arg-type]
        on_end=ends.append,
    )


def test_a_round_completed_by_uploads_made_just_before_finishing_is_published() -> None:
    federation = _Federation()
    ends: list[ServeEnd] = []
    reports = _poll(federation.step, federation, ends)
    assert reports == [0, 1]
    assert federation.published == [0, 1]
    assert [end.finished for end in ends] == [True]


def test_serving_ends_once_a_step_after_the_verdict_closes_nothing() -> None:
    steps: list[None] = []

    def step() -> None:
        steps.append(None)

    class _Watch:
        def check(self) -> ServeEnd:
            return ServeEnd("every participant has finished: serving ends", True)

    ends: list[ServeEnd] = []
    reports = _poll(step, _Watch(), ends)
    assert reports == [] and len(steps) == 2 and len(ends) == 1
