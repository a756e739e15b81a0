"""The errors gradcore raises on purpose about its input (no torch needed to import them).

:mod:`gradcore.validation` raises them and re-exports them; the book tooling (``gradcore``'s
command line) imports them from here, so that it starts without importing torch.
"""

from __future__ import annotations


class GradcoreError(Exception):
    """Base of every error gradcore raises on purpose about its input."""


class GradcoreValueError(GradcoreError, ValueError):
    """An argument of the right kind with a wrong value: out of range, wrong shape, non-finite,
    inconsistent."""


class GradcoreTypeError(GradcoreError, TypeError, ValueError):
    """An argument of the wrong kind, or an option the function does not have.

    Also a ``ValueError``: code written before these checks caught ``ValueError`` for every
    refused input (gradcore raised it for a non-tensor gradient entry, for instance), and
    keeps catching it.
    """


class AttackRefused(GradcoreValueError):
    """An attack declines an observation that lies outside its assumptions, and says which.

    A batch where it recovers one sample, a model it cannot read (no fully-connected first
    layer, no ReLU, no bias), a gradient a defense has blocked (no row left to divide by), a
    batch that is not insecure. An evaluation scores a refused case as the gray guess, what an
    attacker who learned nothing submits (:func:`gradcore.evaluation.matrix`), and catches
    nothing else: any other error inside an attack is a bug and stops the run.
    """
