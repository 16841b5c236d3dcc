"""Every public plotting function of the paper packages leaves the caller's matplotlib state
alone (no ``matplotlib.use``, nothing left in pyplot's figure registry) and writes its PNG.

Each function gets a tiny hand-made record of the shape its ``run_*`` returns (no training).
"""
import pathlib
import re

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pytest

from layerlab.record import Record, Row

E = 4  # epochs / evaluation points in the curves


def _rec(paper, extra, *, rows=(), config=None, title="t"):
    return Record(paper, "plot", title, "reduced", dict(config or {}), rows=list(rows),
                  extra=extra)


def _curves(keys, arms=("gn", "adam", "sgd"), shape=(E,)):
    rng = np.random.default_rng(0)
    return {a: {k: rng.uniform(0.1, 1.0, shape) for k in keys} for a in arms}


# ------------------------------------------------------------------------------ bottleneck
def _a_fig1():
    import jax

    from layerlab import nets
    from layerlab.bottleneck import experiments as ex

    rng = np.random.default_rng(0)
    res, arrays = {}, {}
    for part, act in (("smooth", "tanh"), ("relu", "relu")):
        params = nets.mlp_init(jax.random.key(len(part)), [3, 4, 4, 2], init="he")
        arrays[part] = {"x": rng.standard_normal((6, 3)),
                        "params": jax.tree.map(lambda w: np.asarray(w, np.float64), params)}
        res[part] = {"activation": act, "labels": np.arange(6) % 2, "lam": 1e-3,
                     "ridge": 1e-6, "polished": [{"imbalance": 1e-5}] * 3}
    rec = _rec("bottleneck", {"result": res})
    rec.arrays = arrays
    return ex.plot_a_fig1, rec


def _a_fig2():
    from layerlab.bottleneck import experiments as ex

    w = [2, 4, 8]
    s = {"widths": w, "best": [1.0, 0.5, 0.4], "test_best": [1.2, 0.7, 0.6],
         "loss": np.full((3, 2), 0.5), "plateau_start": 4}
    return ex.plot_a_fig2, _rec("bottleneck", {"sweeps": {"mnist": s, "teacher": s}})


def _a_rank():
    from layerlab.bottleneck import experiments as ex

    v = {"lower_bound": 1.0, "fw": {"loss": [1.5, 1.2, 1.1]},
         "gd_loss": np.array([[2.0, 2.1], [1.3, 1.4], [1.1, 1.2]]), "gd_steps_axis": [0, 10, 20]}
    return ex.plot_a_rank, _rec("bottleneck", {"result": {"B_2": v, "other": {}}})


def _b_structure():
    from layerlab.bottleneck import experiments as ex

    ks, depths = [1, 2], [2, 3]
    ds = {f"k={k} L={L}": {"singular_values": [np.ones((2, 3))] * L, "inner_count": [1, 2],
                           "inner_centred_dominant": [1], "jacobian_rank": [k],
                           "ntk_trace": [float(L)]}
          for k in ks for L in depths}
    return ex.plot_b_structure, _rec("bottleneck", {"result": {"depth_sweep": ds}},
                                     config={"ks": ks, "depths": depths, "tol": 0.1})


def _b_symmetry():
    from layerlab.bottleneck import experiments as ex

    rng = np.random.default_rng(0)
    return ex.plot_b_symmetry, _rec("bottleneck", {
        "P": rng.standard_normal((8, 2)), "stats": rng.standard_normal((8, 2)),
        "mid_layer": 2, "singular_values": [[1.0, 0.5], [1.0, 0.2]]})


def _b_minima():
    from layerlab.bottleneck import experiments as ex

    pts = [{"rank": r, "L": L, "norm2": 1.0 + L, "cost": 1e-3 * L} for r in (1, 2)
           for L in (2, 3)]
    return ex.plot_b_minima, _rec("bottleneck", {"minima": pts})


# ------------------------------------------------------------------------------ dgl
def _dgl_table1():
    from layerlab.dgl import experiments as ex

    rows = [Row(f"{ds} L={L} d={wp} {c} test acc", 90.0 + i, paper=p, spread=0.5)
            for ds, L, wp, ps in ex.ROWS.values() for i, (c, p) in enumerate(zip(ex._COLS, ps))]
    return ex.plot_table1, _rec("dgl", {}, rows=rows)


def _dgl_fig1():
    from layerlab.dgl import experiments as ex

    cells = [{"depth": D, "width": w, "z_mf": [1.0, 1.5], "z_fit": [0.8, 1.0],
              "z_sampled": [1.0, 1.2]} for D in (2, 3) for w in (8, 16)]
    return ex.plot_fig1, _rec("dgl", {"cells": cells, "inputs": "raw"},
                              config={"dataset": "mnist"})


def _dgl_fig4():
    from layerlab.dgl import experiments as ex

    return ex.plot_fig4, _rec("dgl", {"eval_step": [0, 10, 100], "mse": [1.0, 0.5, 0.1],
                                      "dgl_0": [0.9, 0.4, 0.1], "dgl_1": [0.8, 0.3, 0.1]})


# ------------------------------------------------------------------------------ dmn
def _dmn_filters():
    from layerlab import dmn

    return dmn.plot_filters, np.random.default_rng(0).standard_normal((3, 3, 3, 5))


def _dmn_energies():
    from layerlab import dmn

    return dmn.plot_energies, np.array([[4.0, 3.0, 1.0], [6.0, 1.5, 0.5]])


def _dmn_timescales():
    from layerlab.dmn import experiments as ex

    return ex.plot_timescales, _rec("dmn", {"fig7": {"images": [10, 100],
                                                     "eigvals": [[1.0, 0.5], [1.1, 0.4]]}})


def _dmn_table():
    from layerlab.dmn import experiments as ex

    rows = [Row("d11 Input", 60.0, paper=61.0, tol=1.0, spread=0.3, holds=True),
            Row("d22 Input", None, paper=58.0, tol=1.0)]
    return ex.plot_table, _rec("dmn", {}, rows=rows)


def _dmn_fig6():
    from layerlab.dmn import experiments as ex

    rows = [Row(f"mnist F={f} {v} acc", 90.0 + f / 10, spread=0.2) for f in (4, 8)
            for v in ("DMN", "ConvNet")]
    rows.append(Row("mnist baseline acc", 85.0, paper=86.0))
    return ex.plot_fig6, _rec("dmn", {}, rows=rows)


# ------------------------------------------------------------------------------ gnrev
def _gnrev(name, extra):
    from layerlab.gnrev import experiments as ex

    return lambda: (getattr(ex, name), _rec("gnrev", extra))


_GNREV = {
    "plot_fig1": {"curves": _curves(("loss_mean", "accuracy_mean"))},
    "plot_fig2": {"curves": _curves(("train_loss", "test_loss", "test_acc"))},
    "plot_variants": {"curves": _curves(("train_loss", "test_loss", "test_acc"),
                                        arms=("gn", "gn_lr0.1", "adam_then_gn"))},
    "plot_fig3": {"curves": _curves(("per_step",), shape=(60,))},
    "plot_fig4": {"curves": _curves(("ntk_change", "ntk_align", "cka_first", "cka_middle",
                                     "cka_last"))},
    "plot_appG": {"curves": _curves(("w_cos",), shape=(E, 3))},
    "plot_appH": {"curves": {"init": {a: c["v"] for a, c in _curves(("v",), shape=(E, 2)).items()},
                             "pair": {"gn_vs_adam": np.ones((E, 2)),
                                      "gn_vs_sgd": np.ones((E, 2))}}},
    "plot_appM": {"curves": {n: _curves(("fb_loss", "mb_train", "mb_test"))
                             for n in ("wine", "superconductivity")}},
}

CASES = {
    "bottleneck.plot_a_fig1": _a_fig1, "bottleneck.plot_a_fig2": _a_fig2,
    "bottleneck.plot_a_rank": _a_rank, "bottleneck.plot_b_structure": _b_structure,
    "bottleneck.plot_b_symmetry": _b_symmetry, "bottleneck.plot_b_minima": _b_minima,
    "dgl.plot_table1": _dgl_table1, "dgl.plot_fig1": _dgl_fig1, "dgl.plot_fig4": _dgl_fig4,
    "dmn.plot_filters": _dmn_filters, "dmn.plot_energies": _dmn_energies,
    "dmn.plot_timescales": _dmn_timescales, "dmn.plot_table": _dmn_table,
    "dmn.plot_fig6": _dmn_fig6,
    **{f"gnrev.{n}": _gnrev(n, e) for n, e in _GNREV.items()},
}


@pytest.fixture
def svg_backend():
    """The caller's backend is "svg" (not Agg) while the test runs; restored afterwards."""
    old = matplotlib.get_backend()
    matplotlib.use("svg", force=True)
    try:
        yield
    finally:
        matplotlib.use(old, force=True)


@pytest.mark.parametrize("case", list(CASES))
def test_plot_functions_leave_the_backend_and_pyplot_alone(case, svg_backend, tmp_path):
    fn, arg = CASES[case]()
    n_figs = len(plt.get_fignums())
    path = tmp_path / "f.png"
    fn(arg, path)
    assert matplotlib.get_backend() == "svg"
    assert len(plt.get_fignums()) == n_figs  # nothing left in pyplot's registry
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000


def test_the_case_list_covers_every_plot_function():
    """A new public ``plot_*`` of a paper package needs a case above."""
    import importlib

    found = set()
    for mod in ("bottleneck.experiments", "dgl.experiments", "dmn.experiments", "dmn",
                "gnrev.experiments"):
        m = importlib.import_module(f"layerlab.{mod}")
        found |= {f"{mod.split('.')[0]}.{n}" for n in getattr(m, "__all__", dir(m))
                  if n.startswith("plot_") and callable(getattr(m, n))}
    assert found == set(CASES)


def test_no_backend_switch_or_pyplot_in_the_library_and_reproduce_scripts():
    """Figures come from ``layerlab._plotting.subplots`` (Figure + its own Agg canvas)."""
    root = pathlib.Path(__file__).resolve().parents[1]
    bad = re.compile(r"matplotlib\.use\(|import matplotlib\.pyplot|from matplotlib import pyplot")
    hits = [f"{p.relative_to(root)}:{i}" for d in ("layerlab", "reproduce")
            for p in sorted((root / d).rglob("*.py"))
            for i, line in enumerate(p.read_text().splitlines(), 1) if bad.search(line)]
    assert not hits
