"""Keep small linear algebra on one BLAS thread.

The matrices of a Bayesian-optimization step are tiny (tens to hundreds of rows). A multi-threaded
BLAS hands each call to worker threads, and when another process is busy on the same cores those
hand-offs dominate: local RFF Thompson sampling took 4 ms per trial with one OpenBLAS thread and
22-56 ms with two while one other process ran (300 trials, 3-D, 2 cores). :func:`one_blas_thread`
limits BLAS to one thread for the duration of a ``with`` block and restores the previous limits
afterwards, so the user's own numerical code keeps its threads.
"""

from __future__ import annotations

from collections.abc import Callable
import threading

from threadpoolctl import ThreadpoolController

_lock = threading.Lock()
_controller: ThreadpoolController | None = None
# BLAS limits are process-wide: the first block to enter (in any thread) sets them, the last
# to leave restores what was there before.
_active = 0
_restore: Callable[[], None] | None = None


def _enter() -> None:
    global _controller, _active, _restore
    with _lock:
        if _active == 0:
            # Building a controller scans the loaded libraries (~1 ms); do it once, after
            # loading scipy's own BLAS (numpy's is loaded already) so that both are covered.
            if _controller is None:
                import scipy.linalg  # noqa: F401

                _controller = ThreadpoolController()
            _restore = _controller.limit(limits=1, user_api="blas").restore_original_limits
        _active += 1


def _leave() -> None:
    global _active, _restore
    with _lock:
        _active -= 1
        if _active == 0 and _restore is not None:
            _restore()
            _restore = None


class one_blas_thread:  # noqa: N801 (used as a function: ``with one_blas_thread():``)
    """Run the block with BLAS limited to one thread; blocks nest, also across threads.

    Costs about 10 microseconds per outermost entry; a nested one about 1 (a class, not a
    ``contextlib.contextmanager``, whose generator took several: an acquisition search enters
    one per GP posterior).
    """

    __slots__ = ()

    def __enter__(self) -> None:
        _enter()

    def __exit__(self, *exc_info: object) -> None:
        _leave()
