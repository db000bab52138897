"""How many threads the estimators' numerics use: one, for the small problems they solve.

A model fit here works on a few dozen rows (a GP on 12-50 profiles, an MLP on a few hundred): the
matrices are too small for threaded BLAS to gain anything, and on shared cores its threads spin
against each other and every other process. Measured on the 2-core test machine: 30 GP fits +
predictions took 1.8 s of CPU with one OpenBLAS thread and 4-17 s with two (the spread is the
machine's load); a GP's predictions over 18,096 modes 236 → 88 ms. This module is the one place that
says so; callers take :func:`one_blas_thread` around a fit, or :func:`single_threaded` around a whole
task (torch's intra-op threads too).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from threadpoolctl import ThreadpoolController

_CONTROLLER: ThreadpoolController | None = None


def _controller() -> ThreadpoolController:
    """Built once per process: inspecting the loaded libraries costs more than a small fit."""
    global _CONTROLLER
    if _CONTROLLER is None:
        _CONTROLLER = ThreadpoolController()
    return _CONTROLLER


def one_blas_thread() -> AbstractContextManager[Any]:
    """One BLAS thread inside the block (restored after)."""
    return _controller().limit(limits=1, user_api="blas")


@contextmanager
def single_threaded() -> Iterator[None]:
    """One torch intra-op thread and one BLAS / OpenMP thread inside the block; restored after."""
    try:
        import torch  # deferred: torch
    except ImportError:  # torch-free tasks still get the BLAS limit
        torch = None  # type: ignore[assignment]
    before = torch.get_num_threads() if torch is not None else None
    try:
        if torch is not None:
            torch.set_num_threads(1)
        with _controller().limit(limits=1):
            yield
    finally:
        if torch is not None and before is not None:
            torch.set_num_threads(before)
