"""Figures: one report (layers x diagnostics) and a history (diagnostics per layer over training).

Files only: each figure is a ``matplotlib.figure.Figure`` on its own Agg canvas, without
``pyplot`` -- the caller's backend (e.g. Jupyter's inline one) and pyplot's figures are left
alone.
"""
from __future__ import annotations

import os

import numpy as np

from layerlab._plotting import subplots
from layerlab.inspect._monitor import History
from layerlab.inspect._report import _ORDER, Report

__all__ = ["plot_report", "plot_history"]

_LABELS = {
    "dgl_linear": "DGL@Linear / n",
    "dgl_nngp": "DGL@NNGP / n",
    "cka": "linear CKA to reference",
    "probe_accuracy": "held-out linear-probe accuracy",
    "effective_rank": "effective rank",
    "stable_rank": "stable rank",
    "spectral_norm": "spectral norm",
    "weight_stable_rank": "weight stable rank",
    "near_one": "# singular values near 1",
}


def _figure(rows: int, cols: int, figsize: tuple[float, float]):
    """A figure on an Agg canvas (no pyplot, no global backend switch) and its axes grid."""
    return subplots(rows, cols, figsize=figsize, squeeze=False)


def _ordered(values: dict) -> list:
    """Items in the documented diagnostic order (dicts leaving ``jit`` come back sorted)."""
    rank = {d: i for i, d in enumerate(_ORDER)}
    return sorted(values.items(), key=lambda kv: rank.get(kv[0], len(rank)))


def _grid(k: int):
    cols = min(4, max(k, 1))
    return max((k + cols - 1) // cols, 1), cols  # k = 0: one (empty) panel, not zero rows


def plot_report(report: Report, path: str | os.PathLike, *, title: str | None = None) -> str:
    """One panel per diagnostic: a bar per layer (and per weight kernel), plus the spectra.

    Args:
      report: a :class:`Report` (e.g. from ``layer_report``).
      path: output path (PNG; the extension picks the format).  title: optional figure
        title (model-level values are appended; a report of model-level diagnostics only
        draws them as one panel).

    Returns:
      ``str(path)``.
    """
    panels = [(d, report.layers, v) for d, v in _ordered(report.layer_values)]
    panels += [(d, report.weights, v) for d, v in _ordered(report.weight_values)]
    scalars = {a: float(np.asarray(b)) for a, b in report.model_values.items()
               if a != "nonfinite_layers"}
    # only model-level diagnostics (e.g. the NTK alignments): one panel of them
    model_panel = not panels and not report.spectra
    k = len(panels) + (1 if report.spectra else 0) + (1 if model_panel else 0)
    rows, cols = _grid(k)
    fig, axes = _figure(rows, cols, (3.6 * cols, 2.9 * rows))
    for ax, (d, names, v) in zip(axes.flat, panels):
        v = np.asarray(v, np.float64)
        ax.bar(np.arange(len(names)), v, color="C0" if names is report.layers else "C1")
        ax.set_xticks(np.arange(len(names)))
        ax.set_xticklabels(names, rotation=45, ha="right", fontsize=7)
        ax.set_title(_LABELS.get(d, d), fontsize=9)
        ax.grid(axis="y", alpha=0.3)
    if report.spectra:
        ax = axes.flat[len(panels)]
        for i, (n, s) in enumerate(zip(report.weights, report.spectra)):
            s = np.asarray(s, np.float64)
            ax.semilogy(np.arange(1, s.size + 1), np.maximum(s, 1e-12), ".-", ms=3, label=n,
                        color=f"C{i % 10}")
        ax.axhline(1.0, color="k", lw=0.8, ls=":")
        ax.set_title("weight singular values", fontsize=9)
        ax.set_xlabel("index", fontsize=8)
        ax.legend(fontsize=6)
    if model_panel:
        ax = axes.flat[0]
        ax.bar(np.arange(len(scalars)), list(scalars.values()), color="C2")
        ax.set_xticks(np.arange(len(scalars)))
        ax.set_xticklabels(list(scalars), rotation=45, ha="right", fontsize=7)
        ax.set_title("model", fontsize=9)
        ax.grid(axis="y", alpha=0.3)
        if not scalars:
            ax.text(0.5, 0.5, "no diagnostics in this report", ha="center", va="center",
                    transform=ax.transAxes, fontsize=8)
    for ax in list(axes.flat)[k:]:
        ax.axis("off")
    mv = ", ".join(f"{a} = {b:.3g}" for a, b in scalars.items())
    fig.suptitle(" | ".join(t for t in (title, mv) if t), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return str(path)


def plot_history(history: History, path: str | os.PathLike, *, title: str | None = None,
                 extra: str | None = None) -> str:
    """Each diagnostic per layer over training (Fig. 4 of Ben-David & Ringel 2019 style).

    One panel per layer diagnostic (a line per layer), per weight diagnostic (a line per
    weight kernel) and one for the model-level values (and ``history.extra``, e.g. a loss).
    A history of ``fit(runs=True)`` (``history.runs = R``) draws a line per run and layer,
    the runs of one layer in the layer's colour (``history.run(r)`` for one run alone).

    Args:
      history: a :class:`History` (``Monitor.history``).
      path: output PNG path.  title: optional figure title.
      extra: name of one ``history.extra`` metric drawn (dashed, right axis) on the DGL
        panels, e.g. the training loss the DGL tracks in the paper's Fig. 4.

    Returns:
      ``str(path)``.
    """
    from matplotlib import colormaps

    t = np.asarray(history.steps)
    panels = [(d, history.layers, v) for d, v in _ordered(history.layer_values)]
    panels += [(d, history.weights, v) for d, v in _ordered(history.weight_values)]
    scalars = {k: v for k, v in history.model_values.items() if k != "nonfinite_layers"}
    scalars.update(history.extra)
    k = len(panels) + (1 if scalars else 0)
    rows, cols = _grid(k)
    fig, axes = _figure(rows, cols, (3.8 * cols, 2.9 * rows))
    one = history.runs is None
    style = dict(ms=3, marker=".") if one else dict(lw=0.9, alpha=0.7)

    def by_run(v):  # [E, ...] or [E, R, ...] -> [E, R, ...]
        v = np.asarray(v, np.float64)
        return v[:, None] if one else v

    for ax, (d, names, v) in zip(axes.flat, panels):
        v = by_run(v)
        for i, n in enumerate(names):
            color = colormaps["viridis"](i / max(len(names) - 1, 1))
            for r in range(v.shape[1]):
                ax.plot(t, v[:, r, i], label=n if r == 0 else None, color=color, **style)
        ax.set_title(_LABELS.get(d, d), fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.grid(alpha=0.3)
        if extra is not None and extra in history.extra and d.startswith("dgl"):
            ax2 = ax.twinx()
            ax2.plot(t, by_run(history.extra[extra]), "k--", lw=0.8)
            ax2.set_ylabel(extra, fontsize=7)
            ax2.tick_params(labelsize=6)
    firsts = {id(names): i for i, (_, names, _) in reversed(list(enumerate(panels)))}
    for i in firsts.values():  # one legend for the layers, one for the weight kernels
        axes.flat[i].legend(fontsize=6)
    if scalars:
        ax = axes.flat[len(panels)]
        for i, (n, v) in enumerate(scalars.items()):
            v = by_run(v)
            for r in range(v.shape[1]):
                ax.plot(t, v[:, r], label=n if r == 0 else None, color=f"C{i % 10}", **style)
        ax.set_title("model", fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.legend(fontsize=6)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[k:]:
        ax.axis("off")
    title = " | ".join(x for x in (title, None if one else f"{history.runs} runs") if x)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return str(path)
