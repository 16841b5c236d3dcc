"""Non-finite training in :func:`layerlab.loop.fit`: the error and the per-chunk test.

After every chunk the host reads its stacked metrics and the chunk's state-finiteness flag
(one reduction computed on device, see :mod:`._chunks`); :func:`chunk_nonfinite` names the
first NaN/Inf metric (step, name, runs), or else the state leaves that went non-finite.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from layerlab._types import PyTree

__all__ = ["NonFiniteError", "chunk_nonfinite"]


class NonFiniteError(FloatingPointError):
    """A training metric became NaN/Inf.

    Attributes:
      step: index of the first update whose metric was non-finite.
      metric: the metric's name.
      value: the offending value(s).
      runs: indices of the runs that diverged (``runs=True``), else ``None``.
      last_good_step: number of updates applied in ``state`` (and in the last checkpoint
        written, when checkpointing).
      state: the last good state (before the chunk that diverged).
      history: the history up to ``last_good_step``.
    """

    def __init__(self, message: str, *, step: int, metric: str, value: np.ndarray | None,
                 runs: list[int] | None = None, last_good_step: int | None = None,
                 state: PyTree = None, history: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.step = step
        self.metric = metric
        self.value = value
        self.runs = runs
        self.last_good_step = last_good_step
        self.state = state
        self.history = history


def _half_precision_hint(state) -> str:
    """A sentence for a state holding float16/bfloat16 leaves (``""`` otherwise): there the
    likely cause is the optimiser's ``eps`` (optax's Adam default 1e-8 is 0 in float16, so
    the first update divides by zero) or the loss's range, not the learning rate."""
    half = sorted({str(jnp.dtype(a.dtype)) for a in jax.tree_util.tree_leaves(state)
                   if hasattr(a, "dtype") and jnp.issubdtype(a.dtype, jnp.floating)
                   and jnp.finfo(a.dtype).bits == 16})
    if not half:
        return ""
    return (f" The state holds {'/'.join(half)} leaves: a likely cause is the optimiser's "
            "eps (optax's Adam default 1e-8 rounds to 0 in float16, so the first update "
            "divides by zero): pass eps >= ~1e-4 (e.g. optax.adam(lr, eps=1e-4), "
            "dgl.LegoConfig(adam_eps=1e-4)), scale the loss, or keep float32 parameters.")


def _state_message(state, t_from, t_to, bad_runs, where_ck) -> str:
    """Name the state leaves holding NaN/Inf after the chunk ``t_from .. t_to - 1``."""
    names = []
    for path, a in jax.tree_util.tree_flatten_with_path(state)[0]:
        if jnp.issubdtype(a.dtype, jnp.inexact) and not bool(jnp.all(jnp.isfinite(a))):
            names.append(jax.tree_util.keystr(path) or "state")
    where = f" in runs {bad_runs}" if bad_runs is not None else ""
    return (
        f"fit: the state became non-finite (NaN/Inf in {names[:5]}) during steps "
        f"{t_from}..{t_to - 1}{where} while every checked metric stayed finite. Training "
        f"stopped; err.state holds the last good state (after {t_from} steps){where_ck}. "
        "Lower the learning rate, or check the step for division by zero / overflow."
        + _half_precision_hint(state)
    )


def _nonfinite_metric(metrics, names, t_from, length, runs, where_ck, hint=""):
    """``(message, step, metric, value, bad_runs)`` of the first NaN/Inf metric, or ``None``."""
    for k in names:
        if k not in metrics:
            raise KeyError(
                f"fit: check_finite names {k!r}, not a metric of step: {sorted(metrics)}."
            )
        v = np.asarray(metrics[k])
        if not jnp.issubdtype(v.dtype, jnp.inexact):  # (bfloat16 is no numpy inexact)
            continue
        bad = ~np.isfinite(v)
        if bad.any():
            i = int(np.argmax(bad.reshape(length, -1).any(axis=1)))
            bad_runs = np.flatnonzero(bad[i]).tolist() if runs else None
            where = f" in runs {bad_runs}" if runs else ""
            msg = (
                f"fit: training metric {k!r} became non-finite ({v[i].tolist()}) "
                f"at step {t_from + i}{where}. Training stopped; err.state holds the "
                f"last good state (after {t_from} steps){where_ck}. Lower the learning "
                "rate, check the data and the loss for log(0)/division by zero"
                + (", or pass check_finite=False to let a sweep continue past "
                   "diverging runs." if runs else ".")
                + hint
            )
            return msg, t_from + i, k, v[i], bad_runs
    return None


def chunk_nonfinite(metrics: dict[str, np.ndarray], state_ok, new_state, *,
                    check_finite: bool | Sequence[str], t_from: int, t_to: int, runs: bool,
                    where_ck: str):
    """``(message, step, metric, value, bad_runs)`` of the chunk ``t_from .. t_to - 1``'s first
    NaN/Inf, or ``None``.

    Args:
      metrics: the chunk's host metrics ``{name: [L] or [L, R]}``.
      state_ok: the chunk's state-finiteness flag ``[]`` (``[R]`` with ``runs``).
      new_state: the state after the chunk (its non-finite leaves are named).
      check_finite: ``True`` (every metric) or the metric names to check (not ``False``).
      where_ck: text naming the last good checkpoint (``""`` without one).
    """
    names = list(metrics) if check_finite is True else list(check_finite)
    bad = _nonfinite_metric(metrics, names, t_from, t_to - t_from, runs, where_ck,
                            _half_precision_hint(new_state))
    state_ok = np.asarray(state_ok)
    if bad is None and not state_ok.all():
        bad_runs = np.flatnonzero(~state_ok).tolist() if runs else None
        bad = (_state_message(new_state, t_from, t_to, bad_runs, where_ck),
               t_from, "state", None, bad_runs)
    return bad
