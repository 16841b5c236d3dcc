"""Early stopping for :func:`layerlab.loop.fit` as a pure update of a small host-side state."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["EarlyStopping", "ESState", "es_init", "es_update", "es_to_json", "es_from_json"]


class EarlyStopping(NamedTuple):
    """Stop when an eval metric has not improved for ``patience`` evaluations.

    Attributes:
      metric: name of a metric returned by ``eval_fn``.
      mode: ``"min"`` (loss-like) or ``"max"`` (accuracy-like).
      patience: number of consecutive evaluations without an improvement larger than
        ``min_delta`` after which training stops.
      min_delta: minimum change that counts as an improvement.
      restore_best: return the state of the best evaluation instead of the last one.

    With ``runs=True`` the bookkeeping is per run; training stops once *every* run has run
    out of patience (runs that stopped earlier keep training in the shared program; with
    ``restore_best=True`` each run still gets back its own best state).
    """

    metric: str
    mode: str = "min"
    patience: int = 5
    min_delta: float = 0.0
    restore_best: bool = False


class ESState(NamedTuple):
    """Bookkeeping (``[]`` or ``[R]`` numpy arrays): best value, evaluations without
    improvement, the step of the best value; ``stopped`` once every run ran out of patience."""

    best: np.ndarray
    wait: np.ndarray
    best_step: np.ndarray
    stopped: bool = False


def es_init(es: EarlyStopping, runs: int | None) -> ESState:
    shape = (runs,) if runs is not None else ()
    return ESState(np.full(shape, np.inf if es.mode == "min" else -np.inf),
                   np.zeros(shape, np.int64), np.zeros(shape, np.int64), False)


def es_update(es: EarlyStopping, s: ESState, value, t: int) -> tuple[ESState, np.ndarray]:
    """One evaluation at step ``t`` with metric ``value``: the new state and the improved mask."""
    v = np.asarray(value, np.float64)
    if es.mode == "min":
        improved = v < s.best - es.min_delta
    else:
        improved = v > s.best + es.min_delta
    wait = np.where(improved, 0, s.wait + 1)
    new = ESState(np.where(improved, v, s.best), wait, np.where(improved, t, s.best_step),
                  bool(np.all(wait >= es.patience)))
    return new, improved


def es_to_json(s: ESState) -> dict:
    return {"best": np.asarray(s.best).ravel().tolist(),
            "wait": np.asarray(s.wait).ravel().tolist(),
            "best_step": np.asarray(s.best_step).ravel().tolist()}


def es_from_json(e: dict, like: ESState, stopped: bool) -> ESState:
    return ESState(np.asarray(e["best"], np.float64).reshape(like.best.shape),
                   np.asarray(e["wait"], np.int64).reshape(like.wait.shape),
                   np.asarray(e["best_step"], np.int64).reshape(like.best.shape), stopped)
