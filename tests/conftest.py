"""Shared test set-up: a private key directory, a fixture for Optuna's logs in ``caplog``, and
how the suite is shared between two workers.

The suite runs on two workers (``python -m pytest -q -n 2``, pytest-xdist). The tests of
``PROCESS_TESTS`` start a server and participant processes that race each other on real time
(round timeouts, lease ttls): they all run one after another on one worker, never two at once,
while the other worker runs the in-process tests (each worker has its own key directory).

The key directory is set at import (before the test modules snapshot ``os.environ`` for their
worker processes), so tests never touch the user's keys and the processes they start find the
same keys; it is removed when the session ends.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import tempfile

import optuna
import pytest
from threadpoolctl import threadpool_limits

KEY_HOME = tempfile.mkdtemp(prefix="optuna-fedbo-test-keys-")
os.environ["OPTUNA_FEDBO_HOME"] = KEY_HOME

# Two workers on two cores, and the processes the tests start: a multi-threaded BLAS in each
# only adds hand-offs between busy cores (a 100 x 100 Cholesky solve took 9-36 ms with two
# OpenBLAS threads beside other work, 0.9 ms with one). One thread in this process (numpy is
# loaded already) and, through the environment the tests snapshot, in the processes they start.
for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")
threadpool_limits(limits=1, user_api="blas")


#: Test modules (or ``module::test``) that run a server and participant processes at once.
PROCESS_TESTS = frozenset(
    {
        "test_dp_multiprocess.py",
        "test_federation_multiprocess.py",
        "test_fedpne_federation_multiprocess.py",
        "test_fedpne_site_workers.py::test_two_worker_processes_of_a_site_and_another_site_over_sqlite",
        "test_lease_trust.py::test_a_forged_lease_does_not_lock_a_real_site_out",
        "test_lease_trust.py::test_a_forged_trial_duration_does_not_stall_rounds",
        "test_lease_trust.py::test_forged_finished_leases_do_not_end_serve",
        "test_lease_trust.py::test_a_replayed_old_lease_neither_locks_out_nor_ends_serve",
        "test_lifecycle.py::test_a_dead_workers_lease_on_this_host_is_taken_over_at_once",
        "test_lifecycle_multiprocess.py",
        "test_readme.py",
        "test_secagg_multiprocess.py",
        "test_site_workers.py::test_the_workers_of_a_site_share_its_study_and_upload_as_one",
        "test_site_workers.py::test_a_worker_killed_mid_trial_is_taken_over_at_once_by_its_restart",
        "test_trust_damage.py::test_a_deleted_uploads_study_is_created_again_and_the_round_goes_on",
        "test_trust_damage.py::test_a_deleted_main_study_or_configuration_is_one_line_naming_it",
        "test_trust_uploads.py::test_a_spy_with_the_storage_url_recovers_no_vector",
    }
)


def work_unit(nodeid: str) -> str:
    """The unit of work a test belongs to under ``-n``: ``processes`` or the test itself."""
    module, _, test = nodeid.partition("::")
    module = module.rsplit("/", 1)[-1]
    if module in PROCESS_TESTS or f"{module}::{test.split('[', 1)[0]}" in PROCESS_TESTS:
        return "processes"
    return nodeid


if importlib.util.find_spec("xdist") is not None:  # the hook exists only with pytest-xdist

    def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
        """With ``-n`` (``--dist load``, the default): hand out whole units of
        :func:`work_unit`, the largest (``processes``) first. (xdist's own ``--dist loadgroup``
        marks do not group with pytest >= 9.2: it renames a test's node id where pytest no
        longer reads it.)
        """
        if config.getoption("dist") != "load":
            return None
        from xdist.scheduler import LoadScopeScheduling

        class ProcessGroupScheduling(LoadScopeScheduling):
            def _split_scope(self, nodeid: str) -> str:
                return work_unit(nodeid)

        return ProcessGroupScheduling(config, log)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Remove the session's key directory (the tests leave nothing in the temp dir)."""
    shutil.rmtree(KEY_HOME, ignore_errors=True)


@pytest.fixture
def propagate():
    """Let ``caplog`` see Optuna's (and optuna-fedbo's) log records during a test (at every
    level: an in-process CLI run earlier in the worker may have left the package logger at
    WARNING)."""
    package = logging.getLogger("optuna_fedbo")
    level = package.level
    package.setLevel(logging.NOTSET)
    optuna.logging.enable_propagation()
    yield
    optuna.logging.disable_propagation()
    package.setLevel(level)
