"""gradcore.plots: every helper returns a Figure built without pyplot."""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from gradcore import plots  # noqa: E402


@pytest.fixture(autouse=True)
def no_pyplot_figures():
    plt.close("all")
    yield
    assert plt.get_fignums() == [], "a plotting helper registered a pyplot figure"


def visible_axes(figure: Figure) -> list:
    return [axis for axis in figure.axes if axis.get_visible()]


def render(figure: Figure) -> None:
    figure.savefig(io.BytesIO(), format="png", dpi=30)


HISTORIES = {
    "lr 0.1": {"iteration": [0, 1, 2], "mse": [1.0, 0.1, 0.01], "objective": [5.0, 2.0, 1.0]},
    "lr 1.0": {"iteration": [0, 1, 2], "mse": [1.0, 0.5, 0.4], "objective": [5.0, 4.0, 3.0]},
}


@pytest.mark.parametrize("channels", [1, 3])
def test_reconstruction_grid(channels):
    truth = torch.rand(4, channels, 8, 8)
    figure = plots.reconstruction_grid(truth, {"iteration 0": torch.rand(4, channels, 8, 8), "final": truth * 2},
                                       title="DLG", column_titles=["0", "1", "2", "3"])
    assert isinstance(figure, Figure)
    assert len(figure.axes) == 3 * 4
    first = figure.axes[0]
    assert first.get_ylabel() == "private" and first.get_title() == "0"
    assert figure.axes[4].get_ylabel() == "iteration 0" and figure.axes[8].get_ylabel() == "final"
    image = first.get_images()[0].get_array()
    assert image.shape == ((8, 8) if channels == 1 else (8, 8, 3))
    assert figure.axes[8].get_images()[0].get_array().max() <= 1.0  # clamped to [0, 1]
    assert figure.get_suptitle() == "DLG"
    render(figure)


def test_reconstruction_grid_accepts_a_sequence_of_rows():
    truth = torch.rand(2, 1, 8, 8)
    figure = plots.reconstruction_grid(truth, [("a", truth), ("b", truth), ("c", truth)])
    assert len(figure.axes) == 4 * 2


def test_convergence():
    figure = plots.convergence(HISTORIES, key="mse", title="MSE")
    assert isinstance(figure, Figure) and len(figure.axes) == 1
    axis = figure.axes[0]
    assert len(axis.get_lines()) == 2 and axis.get_yscale() == "log" and axis.get_ylabel() == "mse"
    np.testing.assert_array_equal(axis.get_lines()[0].get_ydata(), [1.0, 0.1, 0.01])
    assert [t.get_text() for t in axis.get_legend().get_texts()] == ["lr 0.1", "lr 1.0"]
    assert plots.convergence(HISTORIES, key="objective", log=False).axes[0].get_yscale() == "linear"
    render(figure)


@pytest.mark.parametrize("panels, columns, visible, total", [(3, 2, 3, 4), (1, 2, 1, 2), (4, 2, 4, 4), (2, 1, 2, 2), (1, 1, 1, 1)])
def test_sweep_panels(panels, columns, visible, total):
    figure = plots.sweep_panels({f"knob {k}": HISTORIES for k in range(panels)}, columns=columns, title="sweep")
    assert isinstance(figure, Figure)
    assert len(figure.axes) == total and len(visible_axes(figure)) == visible
    assert [axis.get_title() for axis in visible_axes(figure)] == [f"knob {k}" for k in range(panels)]


def test_sweep():
    figure = plots.sweep([1, 2, 4, 8], {"dlg": [40.0, 20.0, 12.0, 10.0], "idlg": [45.0, 25.0, 14.0, 11.0]},
                         xlabel="batch size", ylabel="PSNR", logx=True)
    assert isinstance(figure, Figure) and len(figure.axes) == 1
    axis = figure.axes[0]
    assert len(axis.get_lines()) == 2 and axis.get_xscale() == "log" and axis.get_yscale() == "linear"
    assert axis.get_legend() is not None
    single = plots.sweep([0.0, 0.1], {"mse": [0.1, 0.2]}, xlabel="sigma", ylabel="MSE", logy=True)
    assert single.axes[0].get_legend() is None and single.axes[0].get_yscale() == "log"
    render(single)


def test_snapshot_columns_puts_each_single_sample_attack_in_its_column():
    from types import SimpleNamespace

    truths = [torch.full((1, 1, 8, 8), value) for value in (0.2, 0.8)]
    cases = [SimpleNamespace(inputs=truth) for truth in truths]
    results = [SimpleNamespace(snapshots=[(0, torch.zeros(1, 1, 8, 8)), (5, truth)]) for truth in truths]
    figure = plots.snapshot_columns(cases, results)
    assert len(figure.axes) == 3 * 2
    assert [figure.axes[k].get_ylabel() for k in (0, 2, 4)] == ["private", "step 0", "step 5"]
    # Column 2's last row is its own attack's final snapshot.
    assert np.allclose(figure.axes[5].get_images()[0].get_array(), 0.8)
    render(figure)
    with pytest.raises(ValueError, match="one result per case"):
        plots.snapshot_columns(cases, results[:1])
    results[1].snapshots = [(0, truths[1])]
    with pytest.raises(ValueError, match="same steps"):
        plots.snapshot_columns(cases, results)
