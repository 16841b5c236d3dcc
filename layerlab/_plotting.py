"""Figures without pyplot, for the library's plotting functions.

A library function must not change its caller's matplotlib state: no ``matplotlib.use``
(which would switch, say, a Jupyter session's inline backend to Agg for the rest of the
session) and no ``pyplot`` (whose figure registry keeps every figure it made until it is
closed).  :func:`subplots` is ``pyplot.subplots`` without either: a
``matplotlib.figure.Figure`` with its own Agg canvas, so ``fig.savefig`` writes PNG/PDF/SVG
files and nothing else needs closing (the figure is garbage-collected with its last
reference).  A returned :class:`~matplotlib.figure.Figure` still displays inline in Jupyter
(IPython shows it through its PNG repr, e.g. ``display(fig)`` or as a cell's last value) and
can be saved with ``fig.savefig``.

matplotlib is imported when a figure is made, not when this module is (``import layerlab``
stays light).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["subplots"]


def subplots(nrows: int = 1, ncols: int = 1, *, figsize: tuple[float, float] | None = None,
             **kwargs: Any) -> tuple[Figure, Any]:
    """``pyplot.subplots(nrows, ncols, figsize=figsize, **kwargs)`` on an Agg canvas.

    Same figure (``figure.*`` rcParams apply as under pyplot) and axes (``sharex``,
    ``sharey``, ``squeeze``, ``gridspec_kw``, ... go to ``Figure.subplots``), but neither the
    global backend nor pyplot's figure registry is touched.

    Returns:
      ``(fig, axes)`` as ``pyplot.subplots`` returns them.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize)
    FigureCanvasAgg(fig)
    return fig, fig.subplots(nrows, ncols, **kwargs)
