"""Monitoring during training: an ``eval_fn`` for ``layerlab.loop.fit`` and a report history.

``loop.fit`` jit-compiles ``eval_fn`` once and calls it every ``eval_every`` steps, at the
chunk boundary where it already synchronises with the host to read the chunk's training
metrics; :func:`monitor` returns such an ``eval_fn`` computing the whole :class:`Report` on a
fixed probe batch (closed over as constants) in one compiled call, so monitoring adds
compiled work and one read-back of its scalars per evaluation, nothing per step.
:meth:`Monitor.history` turns ``fit``'s history back into a :class:`History`
of reports (``[E, L]`` per layer diagnostic; ``[E, R, L]`` for ``fit(runs=True)``), the data
of Fig. 4 of Ben-David & Ringel (2019).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from layerlab._types import PyTree
from layerlab.inspect._models import FeaturesFn, Inspectable
from layerlab.inspect._report import (
    _NEEDS_Y,
    InspectConfig,
    Reference,
    Report,
    _as_model,
    _check_config,
    _check_reference,
    _check_samples,
    _check_y,
    _holdout_mask,
    _probe_batch,
    _probe_labels,
    _report_diagnostics,
    _targets,
    layer_report,
)

__all__ = ["History", "Monitor", "monitor"]


@dataclasses.dataclass(frozen=True)
class History:
    """Reports over training (numpy, on the host).

    With ``loop.fit(..., runs=True)`` (``R`` runs trained in one program) every value keeps
    the runs axis after the evaluation axis: ``[E, R, L]``, ``[E, R, W]``, ``[E, R]``; pick
    one run with :meth:`run`.

    Attributes:
      steps: ``[E]`` training steps of the evaluations.
      layers: ``L`` names.  weights: ``W`` names.
      layer_values: ``{diagnostic: [E, L]}`` (``[E, R, L]`` with runs).
      weight_values: ``{diagnostic: [E, W]}`` (``[E, R, W]``).
      model_values: ``{diagnostic: [E]}`` (``[E, R]``).
      extra: the other scalar ``eval`` metrics in the fit history ``{name: [E]}`` (``[E,
        R]``; e.g. a test loss): those of ``monitor(extra=...)`` and any an ``eval_fn``
        wrapping ``monitor.eval_fn`` returns beside the report's.
      runs: ``R`` for a history of ``fit(runs=True)``, else ``None``.
    """

    steps: np.ndarray
    layers: tuple[str, ...]
    weights: tuple[str, ...]
    layer_values: dict[str, np.ndarray]
    weight_values: dict[str, np.ndarray]
    model_values: dict[str, np.ndarray]
    extra: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    runs: int | None = None

    def run(self, r: int) -> History:
        """The history of run ``r`` alone (``[E, L]`` values) of a ``runs`` history."""
        if self.runs is None:
            raise ValueError("History.run: this history has no runs axis (fit without runs).")
        if not -self.runs <= r < self.runs:
            raise IndexError(f"History.run: run {r} out of range for {self.runs} runs.")

        def sel(d):
            return {k: v[:, r] for k, v in d.items()}

        return History(self.steps, self.layers, self.weights, sel(self.layer_values),
                       sel(self.weight_values), sel(self.model_values), sel(self.extra))

    def report(self, i: int, run: int | None = None) -> Report:
        """The ``i``-th report (without weight spectra); of run ``run`` with runs."""
        if self.runs is not None:
            if run is None:
                raise ValueError(
                    f"History.report: this history holds {self.runs} runs; pass run=r.")
            return self.run(run).report(i)
        if run is not None:
            raise ValueError("History.report: run given, but this history has no runs axis.")
        return Report(
            layer_values={k: v[i] for k, v in self.layer_values.items()},
            weight_values={k: v[i] for k, v in self.weight_values.items()},
            spectra=(),
            model_values={k: v[i] for k, v in self.model_values.items()},
            layers=self.layers,
            weights=self.weights,
        )


@dataclasses.dataclass(frozen=True, eq=False)
class Monitor:
    """``eval_fn`` for ``loop.fit`` computing a :class:`Report` on a fixed probe batch.

    Build it with :func:`monitor`.  ``monitor.eval_fn`` is one function object (fit compiles
    it once); ``monitor.history(fit_history, params)`` rebuilds the reports.
    """

    model: Inspectable
    x: jax.Array
    y: jax.Array | None
    reference: Reference | None
    config: InspectConfig
    params_of: Callable[[Any], Any]
    extra: Callable[[Any], Mapping[str, jax.Array]] | None
    eval_fn: Callable[[Any], dict[str, jax.Array]] = dataclasses.field(init=False, repr=False)

    def __post_init__(self):
        def eval_fn(state):
            params = self.params_of(state)
            out = self.report(params).metrics()
            if self.extra is not None:
                out.update({f"extra:{k}": v for k, v in self.extra(state).items()})
            return out

        object.__setattr__(self, "eval_fn", eval_fn)

    def report(self, params: PyTree) -> Report:
        """The report at ``params`` (pure; what ``eval_fn`` computes)."""
        return layer_report(self.model, params, self.x, self.y, reference=self.reference,
                            config=self.config)

    def history(self, fit_history: Mapping[str, Any], params: Any) -> History:
        """:class:`History` from the history dict of ``loop.fit``.

        A fit with ``runs=True`` (every eval metric ``[E, R]``) gives a history with the runs
        axis (``History.runs = R``; values ``[E, R, L]``).

        Args:
          fit_history: ``fit(...)[1]`` (its ``"eval_step"`` and ``"eval"`` entries).
          params: any parameters of the model (only their structure is used, to learn the
            layer and weight names and their order); with runs, those of one run or the
            stacked ``[R, ...]`` ones of fit's final state.
        """
        if "eval" not in fit_history or "eval_step" not in fit_history:
            raise ValueError(
                "fit_history: no evaluations recorded; pass eval_fn=monitor.eval_fn (and "
                "eval_every) to loop.fit."
            )
        ev = fit_history["eval"]
        steps = np.asarray(fit_history["eval_step"])

        def get(key):
            if key not in ev:
                raise KeyError(f"fit_history: metric {key!r} missing; was eval_fn this monitor's?")
            a = np.asarray(ev[key])
            if a.shape[:1] != steps.shape or a.ndim > 2:
                raise ValueError(
                    f"fit_history: metric {key!r} has shape {a.shape}; expected [E] (or [E, R] "
                    f"from fit(runs=True)) with E = {steps.shape[0]} evaluations.")
            return a

        # the shape of one report metric (every report has "nonfinite_layers")
        first = ("nonfinite_layers" if "nonfinite_layers" in ev else
                 next((k for k in ev if not k.startswith("extra:")), None))
        shape = get(first).shape if first is not None else steps.shape
        runs = shape[1] if len(shape) == 2 else None  # fit(runs=True): [E, R]
        like = self._like(params, runs)

        def value(key):
            a = get(key)
            if a.shape != shape:
                raise ValueError(f"fit_history: metric {key!r} has shape {a.shape}, "
                                 f"{first!r} {shape}.")
            return a

        lv = {d: np.stack([value(f"{d}/{n}") for n in like.layers], axis=-1)
              for d in like.layer_values}
        wv = {d: np.stack([value(f"{d}/{n}") for n in like.weights], axis=-1)
              for d in like.weight_values}
        mv = {d: value(d) for d in like.model_values}
        extra = {k[len("extra:"):]: np.asarray(v) for k, v in ev.items() if k.startswith("extra:")}
        # other scalar eval metrics (an eval_fn wrapping this monitor's, e.g. a test loss)
        ours = ({f"{d}/{n}" for d in like.layer_values for n in like.layers}
                | {f"{d}/{n}" for d in like.weight_values for n in like.weights}
                | set(like.model_values))
        extra.update({k: np.asarray(v) for k, v in ev.items()
                      if k not in ours and not k.startswith("extra:")
                      and np.shape(v) == shape and k not in extra})
        return History(steps, like.layers, like.weights, lv, wv, mv, extra, runs)

    def _like(self, params: Any, runs: int | None) -> Report:
        """The report's structure (names) at ``params``: one run's, or ``R`` stacked ones."""
        if runs is None:
            return jax.eval_shape(self.report, params)
        stacked = all(jnp.ndim(a) >= 1 and jnp.shape(a)[0] == runs
                      for a in jax.tree.leaves(params))
        tries = [jax.vmap(self.report), self.report] if stacked else [self.report]
        err = None
        for f in tries:
            try:
                return jax.eval_shape(f, params)
            except Exception as e:  # any failure: try the other reading, then report
                err = err or e
        raise ValueError(
            f"params: the fit history holds {runs} runs; pass the parameters of one run or "
            f"the stacked [R, ...] ones of fit's final state (state.params), got leaves "
            f"{[jnp.shape(a) for a in jax.tree.leaves(params)][:4]}...") from err


def monitor(
    model: Inspectable | FeaturesFn,
    x: jax.typing.ArrayLike,
    y: jax.typing.ArrayLike | None = None,
    *,
    reference: Reference | None = None,
    config: InspectConfig = InspectConfig(),
    params_of: Callable[[Any], Any] = lambda state: state.params,
    extra: Callable[[Any], Mapping[str, jax.Array]] | None = None,
) -> Monitor:
    """Monitoring of per-layer reports during ``loop.fit``.

    Example::

        mon = inspect.monitor(model, x_probe, y_probe, reference=ref, config=cfg)
        state, hist = loop.fit(ts.step, state0, data, key=key, steps=2000,
                               eval_fn=mon.eval_fn, eval_every=100, eval_at_start=True)
        history = mon.history(hist, state.params)
        inspect.plot_history(history, "history.png")

    With ``fit(..., runs=True)`` (a leading runs axis on the state, e.g. seeds) the same
    ``eval_fn`` runs vmapped over the runs; ``mon.history(hist, state.params)`` then keeps
    the runs axis (``[E, R, L]``) and ``plot_history`` draws a line per run and layer.

    Args:
      model: :class:`Inspectable` or ``features`` callable.
      x: ``[n, ...]`` fixed probe batch.  y: its targets ``[n, C]`` or labels ``[n]``.
      reference: :func:`make_reference` output (e.g. the model at initialisation).
      config: :class:`InspectConfig`.
      params_of: the parameters inside fit's state (default ``state.params``).
      extra: optional ``state -> {name: scalar}`` logged beside the report (e.g. test loss).

    Returns:
      :class:`Monitor`; pass ``monitor.eval_fn`` to ``loop.fit``.
    """
    model = _as_model(model)
    _check_config(config)
    _check_reference(reference)
    _report_diagnostics(config, reference)  # an empty report raises here, not in loop.fit
    x = _probe_batch(x, "monitor")
    y = None if y is None else _check_y(y, "monitor")
    _check_samples(x, y)
    if y is not None and any(d in _NEEDS_Y for d in config.diagnostics):
        _targets(y, x.shape[0], config, "monitor")  # bad targets raise here, not in loop.fit
    if y is not None and "probe_accuracy" in config.diagnostics:
        _probe_labels(y, config)  # likewise: regression targets, too few samples to fit
        _holdout_mask(x.shape[0], config.probe_holdout)
    return Monitor(model, x, y, reference, config, params_of, extra)
