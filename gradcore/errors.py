"""The errors gradcore raises on purpose about its input (no torch needed to import them).

:mod:`gradcore.validation` raises them and re-exports them; the book tooling (``gradcore``'s
command line) imports them from here, so that it starts without importing torch.
"""

from __future__ import annotations


class GradcoreError(Exception):
    """Base of every error gradcore raises on purpose about its input."""


class GradcoreValueError(GradcoreError, ValueError):
    """An argument of the right kind with a wrong value: out of range, wrong shape, non-finite, inconsistent."""


class GradcoreTypeError(GradcoreError, TypeError, ValueError):
    """An argument of the wrong kind, or an option the function does not have.

    Also a ``ValueError``: code written before these checks caught ``ValueError`` for every
    refused input (gradcore raised it for a non-tensor gradient entry, for instance), and
    keeps catching it.
    """
