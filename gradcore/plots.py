"""The book's figures.

Every helper returns a ``matplotlib.figure.Figure`` built without pyplot, so a
notebook shows it exactly once (as the cell's value) and nothing leaks between
cells. Images are ``(B, C, H, W)`` tensors in [0, 1].
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

import numpy as np
import torch
from matplotlib.figure import Figure

from .metrics import align


def _png(figure: Figure) -> bytes:
    import io

    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110, bbox_inches="tight", metadata={"Software": None})
    return buffer.getvalue()


def _register_notebook_display() -> None:
    """Let IPython show a pyplot-free Figure as a PNG when it is a cell's value."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None:
        shell.display_formatter.formatters["image/png"].for_type(Figure, _png)


_register_notebook_display()


def _as_image(tensor: torch.Tensor) -> tuple[np.ndarray, str | None]:
    array = tensor.detach().cpu().double().clamp(0, 1).numpy()
    if array.shape[0] == 1:
        return array[0], "gray"
    return array.transpose(1, 2, 0), None


def _show(axis, tensor: torch.Tensor) -> None:
    image, cmap = _as_image(tensor)
    axis.imshow(image, cmap=cmap, vmin=0, vmax=1, interpolation="nearest")
    axis.set_xticks([])
    axis.set_yticks([])


def reconstruction_grid(
    truth: torch.Tensor,
    rows: Mapping[str, torch.Tensor] | Sequence[tuple[str, torch.Tensor]],
    title: str = "",
    column_titles: Sequence[str] | None = None,
    size: float = 1.3,
    first: str = "private",
) -> Figure:
    """One column per batch sample: the private image on top, reconstructions below.

    Parameters
    ----------
    truth : torch.Tensor
        The private batch ``(B, C, H, W)``; shown in the first row.
    rows : mapping or sequence of (label, tensor)
        Reconstructions (e.g. snapshots over iterations), one row each, aligned to ``truth``;
        a row with fewer images than ``truth`` fills its first columns.
    title : str
        Figure title.
    column_titles : sequence of str, optional
        A title per column (e.g. the sample's label).
    first : str
        The first row's label (``"private"``; e.g. ``"generated"`` for a generator's samples).
    """
    rows = list(rows.items()) if isinstance(rows, Mapping) else list(rows)
    all_rows = [(first, truth)] + rows
    columns = len(truth)
    figure = Figure(
        figsize=(size * columns + 1.0, size * len(all_rows) + (0.4 if title else 0.1)),
        layout="constrained",
    )
    axes = figure.subplots(len(all_rows), columns, squeeze=False)
    for r, (label, images) in enumerate(all_rows):
        for c in range(columns):
            if c >= len(images):  # a shorter row (a smaller client) leaves its last cells empty
                axes[r, c].axis("off")
                continue
            _show(axes[r, c], images[c])
            if c == 0:
                axes[r, c].set_ylabel(label, fontsize=9)
            if r == 0 and column_titles is not None:
                axes[r, c].set_title(column_titles[c], fontsize=9)
    if title:
        figure.suptitle(title, fontsize=11)
    return figure


def image_table(
    rows: Mapping[str, Sequence[torch.Tensor]],
    column_titles: Sequence[str],
    title: str = "",
    size: float = 1.1,
) -> Figure:
    """Images in a table: one row per label, one column per title (e.g. a client's digit under each
    defense).

    Each row holds one ``(C, H, W)`` image per column; a shorter row leaves its last cells empty.
    """
    figure = Figure(
        figsize=(size * len(column_titles) + 1.6, size * len(rows) + (0.5 if title else 0.2)),
        layout="constrained",
    )
    axes = figure.subplots(len(rows), len(column_titles), squeeze=False)
    for r, (label, images) in enumerate(rows.items()):
        for c in range(len(column_titles)):
            if c >= len(images):
                axes[r, c].axis("off")
                continue
            _show(axes[r, c], images[c])
            if c == 0:  # horizontal, beside the row: a long label never runs into its neighbours
                axes[r, c].set_ylabel(label, fontsize=8, rotation=0, ha="right", va="center")
            if r == 0:
                axes[r, c].set_title(column_titles[c], fontsize=8)
    if title:
        figure.suptitle(title, fontsize=11)
    return figure


def convergence(
    histories: Mapping[str, Mapping[str, Sequence[float]]],
    key: str = "mse",
    title: str = "",
    log: bool = True,
    xlabel: str = "iteration",
    ax_size: tuple[float, float] = (5.5, 3.4),
) -> Figure:
    """Curves of one history entry (``mse``, ``psnr``, ``objective``) against iteration, one per
    run."""
    figure = Figure(figsize=ax_size, layout="constrained")
    axis = figure.subplots()
    for label, history in histories.items():
        axis.plot(history["iteration"], history[key], label=str(label))
    if log:
        axis.set_yscale("log")
    axis.set_xlabel(xlabel)
    axis.set_ylabel(key)
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    if title:
        axis.set_title(title, fontsize=10)
    return figure


def sweep_panels(
    panels: Mapping[str, Mapping[str, Mapping[str, Sequence[float]]]],
    key: str = "mse",
    log: bool = True,
    title: str = "",
    columns: int = 2,
    limits: tuple[float, float] | None = (1e-16, 10.0),
) -> Figure:
    """A grid of convergence plots, one panel per swept knob, one curve per value.

    ``limits`` clips the drawn values: an exact recovery reaches float64 round-off
    (1e-16 and below) and a diverged run leaves the top of the panel.
    """
    rows = (len(panels) + columns - 1) // columns
    figure = Figure(figsize=(5.0 * columns, 3.2 * rows), layout="constrained")
    axes = np.atleast_1d(figure.subplots(rows, columns)).ravel()
    for axis, (panel, histories) in zip(axes, panels.items()):
        for label, history in histories.items():
            values = np.asarray(history[key], dtype=float)
            if limits is not None:
                values = np.clip(values, limits[0], limits[1] * 10)
            axis.plot(history["iteration"], values, label=str(label))
        if limits is not None:
            axis.set_ylim(limits[0] / 3, limits[1])
        axis.set_title(panel, fontsize=10)
        axis.set_xlabel("iteration")
        axis.set_ylabel(key)
        if log:
            axis.set_yscale("log")
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
    for axis in axes[len(panels) :]:
        axis.set_visible(False)
    if title:
        figure.suptitle(title, fontsize=11)
    return figure


def sweep(
    values: Sequence[float],
    series: Mapping[str, Sequence[float]],
    xlabel: str,
    ylabel: str,
    title: str = "",
    logx: bool = False,
    logy: bool = False,
) -> Figure:
    """A final metric against a swept parameter, one line per series."""
    figure = Figure(figsize=(5.5, 3.4), layout="constrained")
    axis = figure.subplots()
    for label, ys in series.items():
        axis.plot(values, ys, marker="o", label=str(label))
    axis.set_xlabel(xlabel)
    axis.set_ylabel(ylabel)
    if logx:
        axis.set_xscale("log")
    if logy:
        axis.set_yscale("log")
    axis.grid(alpha=0.3)
    if len(series) > 1:
        axis.legend(fontsize=8)
    if title:
        axis.set_title(title, fontsize=10)
    return figure


def snapshot_grid(
    truth: torch.Tensor,
    result,
    title: str = "",
    size: float = 1.3,
    column_titles: Sequence[str] | None = None,
) -> Figure:
    """The private batch above an attack's snapshots, each aligned to the truth.

    ``result`` is an :class:`gradcore.attacks.AttackResult` run with ``snapshots=...``;
    the batch order the attack settled on is matched to the truth once, by its final
    reconstruction, and used for every row.
    """
    order = align(result.reconstruction, truth)
    rows = [(f"step {step}", images[order]) for step, images in result.snapshots]
    return reconstruction_grid(truth, rows, title, column_titles=column_titles, size=size)


def snapshot_columns(cases, results, title: str = "", size: float = 1.3) -> Figure:
    """Single-sample attacks side by side: each private image above its attack's snapshots.

    ``cases`` are :class:`gradcore.scenarios.Scenario` objects of batch size one and
    ``results`` their attacks' results, run with the same ``snapshots=...`` steps.
    """
    if len(cases) != len(results) or not results:
        raise ValueError(
            f"need one result per case, got {len(cases)} cases and {len(results)} results"
        )
    steps = [step for step, _ in results[0].snapshots]
    if any([step for step, _ in result.snapshots] != steps for result in results):
        raise ValueError("every result must carry snapshots at the same steps")
    truth = torch.cat([case.inputs for case in cases]).cpu()
    rows = [
        (f"step {step}", torch.cat([result.snapshots[k][1] for result in results]).cpu())
        for k, step in enumerate(steps)
    ]
    return reconstruction_grid(truth, rows, title, size=size)


def share_bars(
    shares: Mapping[str, Sequence[float]],
    title: str = "",
    ylabel: str = "share of the recovered row",
) -> Figure:
    """Side-by-side bars of each sample's share in a batch mixture, one group per model."""
    figure = Figure(figsize=(5.5, 3.2), layout="constrained")
    axis = figure.subplots()
    groups = list(shares.items())
    width = 0.8 / len(groups)
    for index, (label, values) in enumerate(groups):
        ordered = np.sort(np.asarray(values, dtype=float))[::-1]
        axis.bar(np.arange(len(ordered)) + index * width, ordered, width=width, label=str(label))
    axis.set_xlabel("sample, most exposed first")
    axis.set_ylabel(ylabel)
    axis.grid(alpha=0.3, axis="y")
    axis.legend(fontsize=8)
    if title:
        axis.set_title(title, fontsize=10)
    return figure


def heatmap(
    values: np.ndarray,
    rows: Sequence[str],
    columns: Sequence[str],
    title: str = "",
    cmap: str = "viridis",
    label: str = "",
    fmt: str = "{:.3f}",
    vmax: float | None = None,
    refused: Iterable = (),
) -> Figure:
    """A matrix of scores (e.g. attack x defense) as coloured cells with the value written in each.

    ``vmax`` caps the colour scale (an exact recovery's PSNR is infinite or >100 dB); capped
    cells read ``>= vmax``. ``refused`` lists ``(row, column)`` cells where the attack declined
    the gradient: they are hatched gray and read "refused", apart from every score (a refusal
    is neither a defense's win nor an attack's); NaN cells (not run) are pale and read "n/a".
    A legend below the matrix says so.
    """
    from matplotlib.patches import Patch, Rectangle

    raw = np.asarray(values, dtype=float).copy()
    refused = {(int(r), int(c)) for r, c in refused}
    for r, c in refused:
        raw[r, c] = np.nan
    values = raw if vmax is None else np.where(np.isnan(raw), np.nan, np.minimum(raw, vmax))
    figure = Figure(
        figsize=(1.35 * len(columns) + 3.4, 0.5 * len(rows) + 2.2), layout="constrained"
    )
    axis = figure.subplots()
    axis.set_facecolor("#f2f2f2")
    image = axis.imshow(np.ma.masked_invalid(values), cmap=cmap, aspect="auto")
    axis.set_xticks(
        range(len(columns)), [str(c) for c in columns], rotation=30, ha="right", fontsize=10
    )
    axis.set_yticks(range(len(rows)), [str(r) for r in rows], fontsize=10)
    finite = values[np.isfinite(values)]
    middle = (finite.min() + finite.max()) / 2 if finite.size else 0.0
    for r in range(values.shape[0]):
        for c in range(values.shape[1]):
            if (r, c) in refused:
                axis.add_patch(
                    Rectangle(
                        (c - 0.5, r - 0.5),
                        1,
                        1,
                        facecolor="#bdbdbd",
                        hatch="///",
                        edgecolor="#7a7a7a",
                        linewidth=0,
                    )
                )
                axis.text(c, r, "refused", ha="center", va="center", fontsize=9, color="black")
            elif np.isfinite(values[r, c]):
                text = (
                    f">= {vmax:g}"
                    if vmax is not None and raw[r, c] >= vmax
                    else fmt.format(values[r, c])
                )
                axis.text(
                    c,
                    r,
                    text,
                    ha="center",
                    va="center",
                    fontsize=9,
                    color="white" if values[r, c] < middle else "black",
                )
            else:
                axis.text(c, r, "n/a", ha="center", va="center", fontsize=8, color="#777777")
    figure.colorbar(image, ax=axis, label=label)
    figure.legend(
        handles=[
            Patch(
                facecolor="#bdbdbd",
                hatch="///",
                edgecolor="#7a7a7a",
                label="refused: the attack declined the gradient",
            ),
            Patch(facecolor="#f2f2f2", edgecolor="#999999", label="n/a: not run"),
        ],
        loc="outside lower center",
        ncols=2,
        fontsize=9,
        frameon=False,
    )
    if title:
        axis.set_title(title, fontsize=11)
    return figure


def accuracy_curves(
    logs: Mapping[str, object], title: str = "", shade: float | None = None, xlabel: str = "round"
) -> Figure:
    """Test accuracy against round, one line per run (objects with ``rounds`` and ``accuracy``).

    ``shade`` marks the rounds ``[0, shade]`` (e.g. the rounds a defense was applied in).
    """
    figure = Figure(figsize=(5.8, 3.4), layout="constrained")
    axis = figure.subplots()
    for label, log in logs.items():
        axis.plot(log.rounds, log.accuracy, label=str(label))
    if shade:
        axis.axvspan(0, shade, color="gray", alpha=0.15, label="defended rounds")
    axis.set_xlabel(xlabel)
    axis.set_ylabel("test accuracy")
    axis.set_ylim(0, 1)
    axis.grid(alpha=0.3)
    axis.legend(fontsize=7)
    if title:
        axis.set_title(title, fontsize=10)
    return figure


def bars(values: Mapping[str, float], ylabel: str, title: str = "", log: bool = False) -> Figure:
    """One bar per named value (e.g. a defense's cost as a multiple of the gradient's)."""
    figure = Figure(figsize=(5.5, 3.2), layout="constrained")
    axis = figure.subplots()
    names = list(values)
    axis.bar(range(len(names)), [values[n] for n in names])
    axis.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
    axis.set_ylabel(ylabel)
    if log:
        axis.set_yscale("log")
    axis.grid(alpha=0.3, axis="y")
    if title:
        axis.set_title(title, fontsize=10)
    return figure


def metric_panels(
    panels: Mapping[str, Mapping[str, Mapping[float, float]]],
    xlabel: str,
    ylabel: str,
    title: str = "",
    logx: bool = False,
    logy: bool = True,
    floor: float | None = 1e-16,
) -> Figure:
    """Side-by-side panels of a final metric against a swept value, one line per series.

    ``panels`` maps a panel title to ``{series: {x: y}}`` (e.g. dataset -> regulariser ->
    batch size -> MSE). Values below ``floor`` (float64 round-off) are drawn at it.
    """
    figure = Figure(figsize=(4.6 * len(panels), 3.4), layout="constrained")
    axes = np.atleast_1d(figure.subplots(1, len(panels)))
    for axis, (panel, series) in zip(axes, panels.items()):
        for label, points in series.items():
            xs, ys = list(points.keys()), np.asarray(list(points.values()), dtype=float)
            axis.plot(
                xs, ys if floor is None else np.maximum(ys, floor), marker="o", label=str(label)
            )
        axis.set_title(panel, fontsize=10)
        axis.set_xlabel(xlabel)
        axis.set_ylabel(ylabel)
        if logx:
            axis.set_xscale("log", base=2)
        if logy:
            axis.set_yscale("log")
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
    if title:
        figure.suptitle(title, fontsize=11)
    return figure


def line_panels(
    panels: Mapping[str, Mapping[str, tuple[Sequence[float], Sequence[float]]]],
    xlabel: str,
    ylabel: str,
    title: str = "",
    logx: bool = False,
    ylim: tuple[float, float] | None = None,
    dashed: Sequence[str] = (),
) -> Figure:
    """Side-by-side panels of lines, each line given as ``(xs, ys)``; labels in ``dashed`` are drawn
    dashed.

    Used for rates against a swept size, one panel per condition (e.g. the insecure rate
    against batch size at initialisation and after training, one line per width).
    """
    figure = Figure(figsize=(4.6 * len(panels), 3.4), layout="constrained")
    axes = np.atleast_1d(figure.subplots(1, len(panels)))
    for axis, (panel, lines) in zip(axes, panels.items()):
        for label, (xs, ys) in lines.items():
            axis.plot(
                xs, ys, marker="o", linestyle="--" if label in dashed else "-", label=str(label)
            )
        axis.set_title(panel, fontsize=10)
        axis.set_xlabel(xlabel)
        axis.set_ylabel(ylabel)
        if logx:
            axis.set_xscale("log", base=2)
        if ylim is not None:
            axis.set_ylim(*ylim)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
    if title:
        figure.suptitle(title, fontsize=11)
    return figure


def privacy_tradeoff(
    epsilons: Sequence[float],
    gains: Mapping[str, Sequence[float]],
    accuracy: Sequence[float],
    title: str = "",
    cap: float = 30.0,
    stopped: float | None = None,
) -> Figure:
    """Attack success and accuracy against epsilon: two panels sharing a logarithmic epsilon axis.

    ``epsilons`` is one value per noise level (``inf`` for no noise: drawn at a right-hand
    position marked with the infinity sign); ``gains`` one series per attack (PSNR over the
    gray guess, capped at ``cap`` dB, ``nan`` where the attack did not run); ``accuracy``
    the model's at each level. ``stopped`` draws the level under which an attack counts as
    stopped.
    """
    finite = [e for e in epsilons if np.isfinite(e)]
    if not finite:
        raise ValueError("at least one finite epsilon is needed for the axis")
    infinity = max(finite) * 300.0
    xs = [e if np.isfinite(e) else infinity for e in epsilons]
    figure = Figure(figsize=(9.4, 3.6), layout="constrained")
    attack_axis, accuracy_axis = figure.subplots(1, 2, sharex=True)
    for label, series in gains.items():
        attack_axis.plot(
            xs, np.minimum(np.asarray(series, dtype=float), cap), marker="o", label=label
        )
    attack_axis.axhline(0.0, color="black", linewidth=0.8)
    if stopped is not None:
        attack_axis.axhline(stopped, color="gray", linestyle=":", label="stopped below")
    attack_axis.set_ylabel(f"PSNR over the gray guess (dB, capped at {cap:g})")
    attack_axis.legend(fontsize=7)
    accuracy_axis.plot(xs, accuracy, marker="o", color="black")
    accuracy_axis.set_ylabel("test accuracy (DP-SGD clients)")
    accuracy_axis.set_ylim(0, 1)
    for axis in (attack_axis, accuracy_axis):
        axis.set_xscale("log")
        axis.set_xlabel("epsilon (sample level, RDP)")
        axis.grid(alpha=0.3)
    # One tick per decade that holds a level (at most eight, evenly thinned), and infinity.
    decades = list(
        range(int(np.floor(np.log10(min(finite)))), int(np.floor(np.log10(max(finite)))) + 1)
    )
    decades = decades[:: max(1, -(-len(decades) // 8))]
    attack_axis.set_xticks(
        [10.0**k for k in decades] + [infinity],
        [f"$10^{{{k}}}$" for k in decades] + ["∞ (no noise)"],
    )
    attack_axis.minorticks_off()
    accuracy_axis.minorticks_off()
    if title:
        figure.suptitle(title, fontsize=11)
    return figure
