"""Keep small linear algebra on one BLAS thread.

The matrices of a Bayesian-optimization step are tiny (tens to hundreds of rows). A multi-threaded
BLAS hands each call to worker threads, and when another process is busy on the same cores those
hand-offs dominate: local RFF Thompson sampling took 4 ms per trial with one OpenBLAS thread and
22-56 ms with two while one other process ran (300 trials, 3-D, 2 cores). :func:`one_blas_thread`
limits BLAS to one thread for the duration of a ``with`` block and restores the previous limits
afterwards, so the user's own numerical code keeps its threads.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
import threading

from threadpoolctl import ThreadpoolController

_controller: ThreadpoolController | None = None
_controller_lock = threading.Lock()
# Nesting depth per thread: only the outermost block sets and restores the limits.
_depth = threading.local()


def _get_controller() -> ThreadpoolController:
    # Building a controller scans the loaded libraries (~1 ms); do it once. numpy and scipy load
    # their BLAS at import, before any caller of this module can run.
    global _controller
    with _controller_lock:
        if _controller is None:
            _controller = ThreadpoolController()
        return _controller


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """Run the block with BLAS limited to one thread (a no-op when already inside one).

    Costs about 10 microseconds per outermost entry.
    """
    depth = getattr(_depth, "value", 0)
    if depth > 0:
        _depth.value = depth + 1
        try:
            yield
        finally:
            _depth.value -= 1
        return
    _depth.value = 1
    try:
        with _get_controller().limit(limits=1, user_api="blas"):
            yield
    finally:
        _depth.value = 0
