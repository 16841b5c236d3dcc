"""Tests for the DMN pictures (plot_filters, plot_energies): what each tile and line shows is
read back from the drawn figure and compared with a direct numpy computation."""
import numpy as np
import pytest
from matplotlib.figure import Figure

from layerlab.dmn._filters import plot_energies, plot_filters


@pytest.fixture
def kept_figures(monkeypatch):
    """The figures the plot functions save (they draw on their own canvases, without pyplot),
    to read what they drew."""
    figs, savefig = [], Figure.savefig

    def keep(fig, *args, **kwargs):
        figs.append(fig)
        return savefig(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    return figs


def test_plot_filters_draws_each_filter_and_its_energy(tmp_path, kept_figures):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((3, 3, 2, 5))          # 5 two-channel filters -> 3 x 2 tiles
    e = [0.5, 1.25, 2.0, 3.5, 7.0]
    path = tmp_path / "f.png"
    plot_filters(w, path, energies_=e, title="t")
    assert path.stat().st_size > 0 and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (fig,) = kept_figures
    axs = fig.axes
    assert len(axs) == 6                          # ceil(sqrt(5)) = 3 columns, 2 rows
    for i in range(5):
        np.testing.assert_allclose(axs[i].images[0].get_array(), w[..., i].sum(2), rtol=1e-12)
        assert axs[i].get_title() == f"{e[i]:.3g}"
    assert not axs[5].images and not axs[5].axison  # the spare tile is blank


def test_plot_filters_rgb_tiles_are_min_max_scaled(tmp_path, kept_figures):
    rng = np.random.default_rng(1)
    w = rng.standard_normal((3, 3, 3, 2))
    plot_filters(w, tmp_path / "rgb.png")
    (fig,) = kept_figures
    for i in range(2):
        t = w[..., i]
        np.testing.assert_allclose(fig.axes[i].images[0].get_array(),
                                   (t - t.min()) / (t.max() - t.min()), rtol=1e-12)


def test_plot_filters_rejects_a_kernel_that_is_not_4d(tmp_path):
    with pytest.raises(ValueError, match=r"kernel must be \[k, k, C, F\]; got shape \(3, 3, 2\)"):
        plot_filters(np.zeros((3, 3, 2)), tmp_path / "x.png")



def test_plot_filters_needs_one_energy_per_filter(tmp_path):
    """Fewer energies than filters raised IndexError mid-drawing (more were ignored)."""
    for e in ([1.0], [1.0, 2.0, 3.0]):
        with pytest.raises(ValueError, match=r"plot_filters: energies_ must hold one energy per "
                                             rf"filter, shape \(2,\) .*got shape \({len(e)},\)"):
            plot_filters(np.zeros((3, 3, 1, 2)), tmp_path / "x.png", energies_=e)
    assert not (tmp_path / "x.png").exists()

def test_plot_energies_draws_minus_log_normalised_spectra(tmp_path, kept_figures):
    lam = np.array([[4.0, 3.0, 1.0], [6.0, 1.5, 0.5]])
    plot_energies(lam, tmp_path / "e.png", title="spectra")
    (fig,) = kept_figures
    (ax,) = fig.axes
    assert len(ax.lines) == 2 and ax.get_title() == "spectra"
    for c, line in enumerate(ax.lines):
        np.testing.assert_array_equal(line.get_xdata(), [1, 2, 3])
        np.testing.assert_allclose(line.get_ydata(), -np.log(lam[c] / lam[c].sum()),
                                   rtol=1e-12)
    # one spectrum [d] is one class
    kept_figures.clear()
    plot_energies(lam[0], tmp_path / "e1.png")
    assert len(kept_figures[0].axes[0].lines) == 1
