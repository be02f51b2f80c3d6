"""The results cache of ``reproduce.py``: its provenance, the shard split, and run times.

* Provenance: ``PROVENANCE.json`` beside the cached results records the scale (its name and
  every setting) and the digest of the code that produced them (every ``optuna_fedbo/`` source
  and the benchmark drivers of :data:`DRIVERS`), plus the git commits that wrote to it (for the
  reader: a commit that changes only documentation or tests gives the same digest). A cache
  from other code or another scale is refused (:class:`CacheMismatch`), or moved aside and
  rebuilt on request; it is never mixed silently. ``reproduce.py``'s own report code is not in
  the digest, so the report can be rewritten from the cache after editing it.
* Shards: :func:`shard_of` splits every job list deterministically (over the full, fixed job
  list, not over what is pending), so processes started at different times on different
  machines take disjoint jobs and together cover all of them.
* Run times: every cached run records its wall time (``seconds``); :class:`Timed` carries the
  sum of the runs behind a claim's values to the report.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import asdict
from dataclasses import dataclass
import hashlib
import json
import os
from pathlib import Path
import random
import subprocess
import time
from typing import Any
from typing import TypeVar

HERE = Path(__file__).resolve().parent
REPOSITORY = HERE.parent
PROVENANCE = "PROVENANCE.json"
#: The benchmark modules whose code computes the cached results (``reproduce.py`` is not one:
#: its run functions only call these, and its report code must stay editable).
DRIVERS = (
    "federation_synthetic.py",
    "fts_lockstep.py",
    "fedpne_common.py",
    "fedpne_synthetic.py",
    "ldp_common.py",
    "ldp_synthetic.py",
    "ldp_heavy_tailed.py",
)

T = TypeVar("T")
#: A run: its cache key and the function that computes its (timed) record (``None``: it
#: cannot run on this machine, e.g. without PyXAB; it stays in the list so that the shard
#: split is the same everywhere).
Job = tuple[tuple[Any, ...], Callable[[], dict[str, Any]] | None]


class CacheMismatch(Exception):
    """The cache was written by other code or at another scale."""


def code_digest(root: Path = REPOSITORY) -> str:
    """SHA-256 over the paths and contents of ``optuna_fedbo/**/*.py`` and :data:`DRIVERS`."""
    files = sorted((root / "optuna_fedbo").rglob("*.py")) + [
        root / "benchmarks" / name for name in DRIVERS
    ]
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def git_commit(root: Path = REPOSITORY) -> str | None:
    """``HEAD``'s commit (with ``+dirty`` for uncommitted changes), or ``None`` outside git."""
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--", "optuna_fedbo"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+dirty" if dirty else "")


@dataclass(frozen=True)
class Provenance:
    """What produced a cache: the scale, the code's digest and the commits that wrote to it."""

    scale: dict[str, Any]
    code: str
    commits: tuple[str, ...] = ()
    accepted_codes: tuple[str, ...] = ()  # other digests let in by --accept-cache-from-other-code

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def read(cls, root: Path) -> Provenance | None:
        path = root / PROVENANCE
        if not path.exists():
            return None
        raw = json.loads(path.read_text(encoding="utf-8"))
        return cls(
            scale=raw["scale"],
            code=raw["code"],
            commits=tuple(raw.get("commits", ())),
            accepted_codes=tuple(raw.get("accepted_codes", ())),
        )

    def write(self, root: Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        temporary = root / f"{PROVENANCE}.{os.getpid()}.tmp"  # shards may start together
        temporary.write_text(self.to_json(), encoding="utf-8")
        temporary.replace(root / PROVENANCE)


def _has_results(root: Path) -> bool:
    return root.exists() and any(p.name != PROVENANCE for p in root.rglob("*.json"))


def open_cache(
    root: Path,
    scale: Any,
    code: str,
    commit: str | None,
    *,
    rebuild: bool = False,
    accept_other_code: bool = False,
) -> Provenance:
    """Check (or create) the cache's provenance before any run writes to it.

    Args:
        root: The cache directory of one scale.
        scale: The scale (a dataclass) the runs use.
        code: :func:`code_digest` of the running code.
        commit: :func:`git_commit`, recorded for the reader.
        rebuild: Move a mismatching cache aside (``<root>.stale-<time>``) and start afresh.
        accept_other_code: Keep a cache from other code at the same scale; the new digest is
            recorded and the report lists every digest its results came from.

    Raises:
        CacheMismatch: The cache holds results of another scale or other code (or results
            without provenance) and neither ``rebuild`` nor (for code) ``accept_other_code``.
    """
    settings = json.loads(json.dumps(asdict(scale)))  # tuples as JSON lists, as read back
    found = Provenance.read(root)
    problem = None
    if found is None and _has_results(root):
        problem = f"the cache {root} has results but no {PROVENANCE} (written by older code)"
    elif found is not None and found.scale != settings:
        problem = f"the cache {root} holds another scale ({found.scale} vs {settings})"
    elif found is not None and code != found.code and code not in found.accepted_codes:
        if not accept_other_code or rebuild:
            problem = (
                f"the cache {root} was written by other code (digest {found.code[:12]}, "
                f"commits {', '.join(found.commits) or 'unknown'}; now {code[:12]})"
            )
    if problem is not None:
        if not rebuild:
            hint = "pass --rebuild-cache to move it aside and start afresh"
            if found is not None and found.scale == settings:
                hint += " (or --accept-cache-from-other-code to mix, listed in the report)"
            raise CacheMismatch(f"{problem}: {hint}.")
        stale = root.with_name(f"{root.name}.stale-{time.strftime('%Y%m%d-%H%M%S')}")
        root.rename(stale)
        found = None
    if found is None:
        found = Provenance(settings, code)
    if code != found.code and code not in found.accepted_codes:
        found = Provenance(found.scale, found.code, found.commits, (*found.accepted_codes, code))
    if commit is not None and commit not in found.commits:
        found = Provenance(found.scale, found.code, (*found.commits, commit), found.accepted_codes)
    found.write(root)
    return found


def check_scale(root: Path, scale: Any) -> None:
    """Refuse to read a cache of another scale (``--report-only`` only reads: other code is
    allowed there, and the report says which code computed its results).

    Raises:
        CacheMismatch: ``PROVENANCE.json`` records other scale settings.
    """
    found = Provenance.read(root)
    settings = json.loads(json.dumps(asdict(scale)))
    if found is not None and found.scale != settings:
        raise CacheMismatch(
            f"the cache {root} holds another scale ({found.scale} vs {settings}): rerun it at "
            "this scale (--rebuild-cache) or restore the scale's settings."
        )


def parse_shard(text: str | None) -> tuple[int, int]:
    """``"K/N"`` (1 <= K <= N) -> ``(K, N)``; ``None`` -> ``(1, 1)``.

    Raises:
        ValueError: For anything else.
    """
    if text is None:
        return 1, 1
    index, _, count = text.partition("/")
    try:
        k, n = int(index), int(count)
    except ValueError:
        k = n = 0
    if not 1 <= k <= n:
        raise ValueError(f"--shard must be K/N with 1 <= K <= N (e.g. 2/4), got {text!r}.")
    return k, n


def shard_of(jobs: Sequence[T], shard: tuple[int, int]) -> list[T]:
    """Shard ``K/N``'s part of ``jobs``, in their order.

    Positions are dealt round robin in a fixed pseudo-random order of the full list (never of
    the pending jobs), so the shards are disjoint, cover every job whenever each of them
    starts, hold equally many jobs (+-1), and mix the methods (a plain round robin would give
    one shard every run of the methods at even positions).
    """
    k, n = shard
    order = random.Random(0).sample(range(len(jobs)), len(jobs))
    owner = {position: rank % n for rank, position in enumerate(order)}
    return [job for position, job in enumerate(jobs) if owner[position] == k - 1]


def run_jobs(
    name: str, jobs: Sequence[Job], cache: Any, deadline: float, shard: tuple[int, int]
) -> None:
    """Run shard ``K/N``'s part of ``jobs`` that is not in ``cache`` until ``deadline``."""
    mine = shard_of(jobs, shard)
    unavailable = 0
    for key, make in mine:
        if cache.get(*key) is not None:
            continue
        if make is None:
            unavailable += 1
            continue
        if time.time() > deadline:
            print(f"Time budget spent in {name}.")
            return
        cache.put(make(), *key)
    print(f"{name}, shard {shard[0]}/{shard[1]}: {len(mine)} runs", flush=True)
    if unavailable:
        print(f"  {unavailable} runs need a driver missing here (PyXAB?): run this shard again "
              "where it is installed", flush=True)  # fmt: skip


def timed(make: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``make()``'s record with its wall time in ``seconds``."""
    start = time.perf_counter()
    record = make()
    record["seconds"] = time.perf_counter() - start
    return record


class Timed(dict):
    """Per-function values of one method, with the wall time of the runs behind them."""

    def __init__(self, values: Mapping[int, Any], seconds: float) -> None:
        super().__init__(values)
        self.seconds = seconds

    @classmethod
    def of(cls, records: Mapping[int, Mapping[str, Any]], value: Callable[[Any], Any]) -> Timed:
        """``{seed: value(record)}`` with the summed ``seconds`` of the records."""
        return cls(
            {seed: value(record) for seed, record in records.items()},
            sum(float(record.get("seconds", 0.0)) for record in records.values()),
        )


def row_seconds(*sides: Mapping[int, Any], seeds: Sequence[int] | None = None) -> float | None:
    """Wall time of the runs behind a claim: the sides' run times (``None`` if unrecorded).

    With ``seeds`` (the paired functions) a side's time is prorated to those functions.
    """
    total = 0.0
    for side in sides:
        seconds = getattr(side, "seconds", None)
        if seconds is None:
            return None
        if seeds is not None and side:
            seconds *= len(set(seeds) & set(side)) / len(side)
        total += seconds
    return total


def format_duration(seconds: float | None) -> str:
    """``'-'``, ``'42 s'``, ``'12 min'`` or ``'3.4 h'``."""
    if seconds is None:
        return "-"
    if seconds < 100:
        return f"{seconds:.0f} s"
    if seconds < 6000:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def coverage(done: int, total: int) -> str:
    """``'all 40 runs'`` or ``'31 of 40 runs; 9 missing'``."""
    if done == total:
        return f"all {total} runs"
    return f"{done} of {total} runs; {total - done} missing"
