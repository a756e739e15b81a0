"""BLAS threads around small dense algebra."""

from __future__ import annotations

import contextlib


def single_thread():
    """BLAS on one thread: these matrices are small, and two cores shared between processes thrash
    otherwise.

    A context manager; without ``threadpoolctl`` (optional: only speed depends on it) it does
    nothing.
    """
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return contextlib.nullcontext()
    return threadpool_limits(1)
