"""``benchmarks/reproduce.py``'s infrastructure, without running any benchmark: the shard split
covers every run once, a cache from other code or another scale is refused (or moved aside and
rebuilt, never mixed silently), and run times reach the report's rows."""

from __future__ import annotations

from dataclasses import dataclass
import json
from pathlib import Path
import sys

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import reproduce_infra as infra  # noqa: E402


@dataclass(frozen=True)
class _Scale:
    name: str = "full"
    functions: int = 20
    horizons: tuple[int, ...] = (250, 500)


@pytest.mark.parametrize("count", [1, 2, 3, 7])
def test_the_shards_are_disjoint_and_cover_every_job(count: int) -> None:
    jobs = [f"job-{i}" for i in range(23)]
    parts = [infra.shard_of(jobs, (k, count)) for k in range(1, count + 1)]
    assert sorted(j for part in parts for j in part) == sorted(jobs)
    assert all(infra.shard_of(jobs, (k + 1, count)) == part for k, part in enumerate(parts))
    assert sum(len(part) for part in parts) == len(jobs)
    assert max(map(len, parts)) - min(map(len, parts)) <= 1  # balanced


def test_a_shard_split_does_not_depend_on_what_is_pending_and_mixes_methods() -> None:
    # 10 functions x 8 methods, as the FTS family's fixed order: (function, method).
    jobs = [(seed, method) for seed in range(10) for method in range(8)]
    first = infra.shard_of(jobs, (1, 2))
    # Shard 1/2 starting late (after shard 2/2 finished) takes exactly the same runs.
    assert infra.shard_of(list(jobs), (1, 2)) == first
    assert first == sorted(first)  # in the list's order (tier by tier)
    assert {method for _, method in first} == set(range(8))  # not only even positions


@pytest.mark.parametrize("text", ["0/2", "3/2", "2", "a/b", "1/0", "-1/2"])
def test_a_bad_shard_is_refused_naming_the_option(text: str) -> None:
    with pytest.raises(ValueError, match="--shard must be K/N"):
        infra.parse_shard(text)


def test_shard_parsing() -> None:
    assert infra.parse_shard("2/5") == (2, 5)
    assert infra.parse_shard(None) == (1, 1)


def test_a_new_cache_records_scale_code_and_commit(tmp_path: Path) -> None:
    root = tmp_path / "full"
    infra.open_cache(root, _Scale(), "a" * 64, "c1")
    infra.open_cache(root, _Scale(), "a" * 64, "c2")  # another commit, same code
    found = infra.Provenance.read(root)
    assert found == infra.Provenance(
        {"name": "full", "functions": 20, "horizons": [250, 500]}, "a" * 64, ("c1", "c2")
    )


def _cache_with_a_result(root: Path, code: str = "a" * 64) -> Path:
    infra.open_cache(root, _Scale(), code, "c1")
    result = root / "problem" / "method" / "0.json"
    result.parent.mkdir(parents=True)
    result.write_text(json.dumps({"curve": [1.0], "seconds": 3.0}))
    return result


def test_a_cache_from_other_code_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "full"
    result = _cache_with_a_result(root)
    with pytest.raises(infra.CacheMismatch, match="written by other code.*--rebuild-cache"):
        infra.open_cache(root, _Scale(), "b" * 64, "c2")
    assert result.exists()
    assert infra.Provenance.read(root).code == "a" * 64  # untouched
    assert infra.Provenance.read(root).commits == ("c1",)


def test_a_cache_of_another_scale_is_refused_even_when_other_code_is_accepted(
    tmp_path: Path,
) -> None:
    root = tmp_path / "full"
    _cache_with_a_result(root)
    other = _Scale(functions=10)
    with pytest.raises(infra.CacheMismatch, match="another scale"):
        infra.open_cache(root, other, "a" * 64, "c1", accept_other_code=True)
    with pytest.raises(infra.CacheMismatch, match="another scale"):
        infra.check_scale(root, other)  # --report-only
    infra.check_scale(root, _Scale())  # the same scale reads


def test_results_without_provenance_are_refused(tmp_path: Path) -> None:
    root = tmp_path / "full"
    (root / "p").mkdir(parents=True)
    (root / "p" / "0.json").write_text("{}")
    with pytest.raises(infra.CacheMismatch, match="no PROVENANCE.json"):
        infra.open_cache(root, _Scale(), "a" * 64, None)
    assert not (root / infra.PROVENANCE).exists()


def test_rebuild_moves_the_old_cache_aside_and_starts_afresh(tmp_path: Path) -> None:
    root = tmp_path / "full"
    result = _cache_with_a_result(root)
    infra.open_cache(root, _Scale(), "b" * 64, "c2", rebuild=True)
    (stale,) = tmp_path.glob("full.stale-*")
    assert (stale / result.relative_to(root)).exists()  # nothing lost
    assert not result.exists()  # nothing mixed
    assert infra.Provenance.read(root) == infra.Provenance(
        {"name": "full", "functions": 20, "horizons": [250, 500]}, "b" * 64, ("c2",)
    )


def test_accepting_other_code_is_recorded_for_the_report(tmp_path: Path) -> None:
    root = tmp_path / "full"
    result = _cache_with_a_result(root)
    infra.open_cache(root, _Scale(), "b" * 64, "c2", accept_other_code=True)
    found = infra.Provenance.read(root)
    assert result.exists()
    assert (found.code, found.accepted_codes, found.commits) == (
        "a" * 64,
        ("b" * 64,),
        ("c1", "c2"),
    )
    # Once accepted, that code continues without the flag.
    infra.open_cache(root, _Scale(), "b" * 64, "c2")


def test_the_code_digest_changes_with_a_library_source_or_a_driver(tmp_path: Path) -> None:
    (tmp_path / "optuna_fedbo" / "core").mkdir(parents=True)
    (tmp_path / "benchmarks").mkdir()
    library = tmp_path / "optuna_fedbo" / "core" / "x.py"
    library.write_text("a = 1\n")
    for name in infra.DRIVERS:
        (tmp_path / "benchmarks" / name).write_text("")
    first = infra.code_digest(tmp_path)
    assert infra.code_digest(tmp_path) == first
    library.write_text("a = 2\n")
    second = infra.code_digest(tmp_path)
    (tmp_path / "benchmarks" / infra.DRIVERS[0]).write_text("b = 1\n")
    assert len({first, second, infra.code_digest(tmp_path)}) == 3
    (tmp_path / "benchmarks" / "reproduce.py").write_text("report = 1\n")  # not in the digest
    assert infra.code_digest(tmp_path) == infra.code_digest(tmp_path)


def test_a_run_records_its_wall_time(monkeypatch) -> None:
    clock = iter([100.0, 142.5])
    monkeypatch.setattr(infra.time, "perf_counter", lambda: next(clock))
    assert infra.timed(lambda: {"value": [1]}) == {"value": [1], "seconds": 42.5}


def test_a_rows_time_sums_both_sides_over_the_paired_functions() -> None:
    records = {0: {"v": 1.0, "seconds": 10.0}, 1: {"v": 2.0, "seconds": 30.0}}
    better = infra.Timed.of(records, lambda r: r["v"])
    assert (dict(better), better.seconds) == ({0: 1.0, 1: 2.0}, 40.0)
    worse = infra.Timed({0: 3.0, 1: 4.0, 2: 5.0}, 90.0)
    assert infra.row_seconds(better, worse) == 130.0
    # Paired on functions 0 and 1 only: the third function's run is not this row's.
    assert infra.row_seconds(better, worse, seeds=[0, 1]) == 40.0 + 60.0
    assert infra.row_seconds(better, {0: 1.0}) is None  # unrecorded: unknown, not 0
    assert [infra.format_duration(s) for s in (None, 42, 720, 12_600)] == [
        "-",
        "42 s",
        "12 min",
        "3.5 h",
    ]
    assert infra.coverage(31, 40) == "31 of 40 runs; 9 missing"


def test_run_jobs_runs_only_its_shard_and_skips_cached_runs(tmp_path: Path) -> None:
    import seedstats as st

    cache = st.ResultCache(tmp_path)
    made: list[int] = []

    def job(i: int) -> infra.Job:
        return (("g", "m", i), lambda: made.append(i) or {"value": i})

    cache.put({"value": 2}, "g", "m", 2)
    jobs = [job(i) for i in range(6)] + [(("g", "m", 6), None)]  # 6: cannot run here
    infra.run_jobs("test", jobs, cache, float("inf"), (1, 2))
    mine = {key[2] for key, _ in infra.shard_of(jobs, (1, 2))}
    assert made == sorted(mine - {2, 6})  # its own runs, but not the cached one
    infra.run_jobs("test", jobs, cache, float("-inf"), (2, 2))  # past the deadline
    assert made == sorted(mine - {2, 6})
    assert {i for i in range(7) if cache.get("g", "m", i) is not None} == (mine - {6}) | {2}


@pytest.fixture
def reproduce(monkeypatch, tmp_path: Path):
    import reproduce

    monkeypatch.setattr(reproduce, "CACHE", tmp_path / "cache")
    monkeypatch.setattr(reproduce, "REPORT", tmp_path / "REPRODUCTION.md")
    monkeypatch.setattr(reproduce, "PLOTS", tmp_path / "plots")
    return reproduce


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--shard", "3/2"], "--shard must be K/N"),
        (["--groups", "fts,ldpp"], "--groups takes"),
        ([], "written by other code"),
        (["--report-only", "--scale", "quick"], "another scale"),
    ],
)
def test_the_cli_refuses_bad_input_with_status_2(
    reproduce, monkeypatch, capsys, argv: list[str], message: str
) -> None:
    root = reproduce.CACHE / "smoke"
    scale = reproduce.SCALES["smoke"]
    infra.open_cache(root, scale, "0" * 64, "old")
    (root / "quick").mkdir()
    infra.Provenance({"name": "quick"}, "0" * 64).write(reproduce.CACHE / "quick")
    monkeypatch.setattr(sys, "argv", ["reproduce.py", "--scale", "smoke", *argv])

    def ran(*args, **kwargs):
        raise AssertionError("a run or the report started despite the bad input")

    for name in ("run_fts_family", "clip_norms", "write_report"):
        monkeypatch.setattr(reproduce, name, ran)
    monkeypatch.setattr(reproduce.infra, "run_jobs", ran)
    with pytest.raises(SystemExit) as exit_info:
        reproduce.main()
    assert exit_info.value.code == 2
    error = capsys.readouterr().err.strip()
    assert message in error and len(error.splitlines()) == 1
    assert not reproduce.REPORT.exists()  # nothing written
    assert infra.Provenance.read(root).code == "0" * 64


def test_a_report_row_says_its_scale_functions_and_run_time(reproduce) -> None:
    report = reproduce.Report(reproduce.SCALES["smoke"])
    better = infra.Timed({0: 1.0, 1: 2.0, 2: 1.0}, 600.0)
    worse = infra.Timed({0: 2.0, 1: 3.0, 2: 2.0}, 1200.0)
    report.ordering("P", "Fig. 1", "a beats b", "a below b", better, worse)
    report.ordering("P", "Fig. 1", "a beats c", "a below c", better, {0: 1.0})
    assert report.claims[0][-1] == "smoke, 3 functions, 30 min"
    assert report.claims[1][-1] == "-"
    assert report.claims[1][4:6] == ["not run", report.claims[1][5]]
    assert "1 paired function(s) in the cache" in report.claims[1][5]


def test_the_paper_ldp_preset_is_the_theorems_and_practical_is_the_samplers() -> None:
    import ldp_common
    import numpy as np

    from optuna_fedbo.core.ldp import LaplaceRewards
    from optuna_fedbo.core.ldp import SquaredExponential
    from optuna_fedbo.core.ldp.parameters import moma_epoch_length
    from optuna_fedbo.core.ldp.parameters import practical_regularization
    from optuna_fedbo.samplers._ldp_ucb import DEFAULT_BETA_SCALES

    kernel, rewards = SquaredExponential(0.2), LaplaceRewards(1.0, 2.0, 1.0)

    def build(name: str):
        return ldp_common.make_algorithm(name, kernel, rewards, 1000, np.random.default_rng(0))

    moma = build("moma:paper")
    assert (moma.regularization, moma.beta_scale, moma.max_dictionary_size) == (1.0, 1.0, None)
    assert moma.epoch_length == moma_epoch_length(1000, ldp_common.DELTA) == 295
    assert (build("tgp:paper").regularization, build("tgp:paper").beta_scale) == (1.0, 1.0)
    assert build("ata:paper").max_dictionary_size is None
    practical = build("moma-k")
    assert practical.regularization == practical_regularization(rewards) != 1.0
    assert practical.beta_scale == DEFAULT_BETA_SCALES["moma"]
    assert practical.epoch_length == 13
    only_beta = build("tgp:paper+beta")
    assert (only_beta.regularization, only_beta.beta_scale) == (1.0, DEFAULT_BETA_SCALES["tgp"])
    with pytest.raises(ValueError, match="Unknown LDP preset 'papr'"):
        build("tgp:papr")
