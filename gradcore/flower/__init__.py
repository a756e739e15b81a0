"""A curious server on a real Flower deployment (Beutel et al., 2020, Flower 1.42).

Every other chapter of the book hands the attacks a gradient that gradcore computed. Here
the gradient travels the way it does in deployments people run: Flower's SuperLink and
SuperNodes, its gRPC/HTTP messages, a client-app process per client and round. The server
(:class:`gradcore.flower.app.CuriousFedAvg`) runs FedAvg unchanged and keeps what each
client sent; the book attacks those records.

* :mod:`gradcore.flower.protocol`: the setup and schedule both sides read, the client's
  update, the captures and the gradient an attacker recovers from them (no Flower needed);
* :mod:`gradcore.flower.app`: Flower's ``ClientApp`` and ``ServerApp``;
* :mod:`gradcore.flower.deployment`: the SuperLink and SuperNodes on loopback, started and
  always stopped.

:func:`run` is the entry point: one deployment, one round per schedule entry.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from .. import validation as check
from . import deployment, protocol
from .deployment import FLOWER_VERSION, INSTALL_HINT, Launch, require_flower
from .protocol import (
    Capture,
    client_update,
    load_captures,
    make_round,
    make_setup,
    observed_gradient,
)

__all__ = [
    "FLOWER_VERSION",
    "INSTALL_HINT",
    "Capture",
    "Deployment",
    "client_update",
    "load_captures",
    "make_round",
    "make_setup",
    "observed_gradient",
    "require_flower",
    "run",
]


@dataclass
class Deployment:
    """A finished deployment: what the curious server captured and what the run cost."""

    setup: dict
    schedule: list
    captures: list
    launch: Launch

    def capture(self, server_round: int, partition_id: int) -> Capture:
        for capture in self.captures:
            if (capture.server_round, capture.partition_id) == (server_round, partition_id):
                return capture
        raise check.GradcoreValueError(
            f"no capture of client {partition_id} in round {server_round}"
        )


def run(
    model: str,
    dataset: str,
    partitions: Sequence[Sequence[int]],
    schedule: Sequence[dict],
    seed: int = 0,
    directory: str | Path | None = None,
    port: int | None = None,
    timeout: float = 600.0,
    isolate: bool = True,
    dataset_options: dict | None = None,
) -> Deployment:
    """Deploy the book's FedAvg app on Flower, on this machine, and return what the curious server
    captured.

    Parameters
    ----------
    model : str
        A :func:`gradcore.models.build` spec, e.g. ``"mlp(widths=(512, 512))"``.
    dataset : str
        A name in :data:`gradcore.data.DATASETS`; ``partitions[i]`` are the indices client ``i``
        holds.
    schedule : sequence of dict
        One :func:`gradcore.flower.protocol.make_round` per round.
    directory : path, optional
        Where the app, Flower's home, the logs and the captures go and stay (when None, a
        temporary folder, removed once the captures are read, kept when the deployment fails;
        reused folders are emptied first).
    port : int, optional
        The SuperLink's port (a free one when None; refused, with its number, when taken).
    timeout : float
        Seconds the run may take before every process is stopped.
    isolate : bool
        Run the deployment in a network namespace holding only loopback, where the kernel allows it.

    Raises
    ------
    GradcoreValueError
        Flower missing or another version, a port taken, a bad setup or schedule (before anything
        starts).
    RuntimeError
        The deployment failed; the message holds the tail of Flower's logs.
    """
    require_flower()
    if not schedule:
        raise check.GradcoreValueError("the schedule is empty: give one make_round(...) per round")
    schedule = [protocol.make_round(**entry) for entry in schedule]
    check.number("timeout", timeout, low=0, low_open=True)
    folder = (
        Path(directory)
        if directory is not None
        else Path(tempfile.mkdtemp(prefix="gradcore-flower-"))
    )
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    setup = protocol.make_setup(
        model, dataset, partitions, folder / "captures", seed, dataset_options
    )
    deployment.write_app(folder, setup, schedule)
    try:
        launched = deployment.launch(
            folder, len(partitions), port=port, timeout=timeout, isolate=isolate
        )
    except RuntimeError as error:
        raise RuntimeError(f"{error}\n(app, logs and captures kept in {folder})") from None
    captures = protocol.load_captures(setup["captures"])
    if (
        directory is None
    ):  # the captures are in memory now; a temporary folder would outlive every run
        shutil.rmtree(folder, ignore_errors=True)
    return Deployment(setup, schedule, captures, launched)
