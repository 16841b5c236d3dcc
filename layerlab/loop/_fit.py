"""``fit``: drive a pure step over in-memory data inside jit-compiled ``lax.scan`` chunks.

The parts, one job each: :mod:`._args` (argument checks), :mod:`._placement` (mesh),
:mod:`._chunks` (the compiled chunk runner and its permutations), :mod:`._checkpoint` (save,
resume with the run fingerprint, lock, fallback), :mod:`._early_stopping` (a pure update),
:mod:`._history` (the history kept as chunks).  ``fit`` below strings them together.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from layerlab.loop._args import check_fit_args
from layerlab.loop._checkpoint import Checkpointing
from layerlab.loop._chunks import (
    _all_finite,
    _ceil_to,
    _default_chunk,
    _run_chunk,
    _run_eval,
    _select_best,
)
from layerlab.loop._early_stopping import (
    EarlyStopping,
    es_from_json,
    es_init,
    es_to_json,
    es_update,
)
from layerlab.loop._history import HistoryLog
from layerlab.loop._placement import Placement, place

__all__ = ["fit", "EarlyStopping", "NonFiniteError"]


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

    def __init__(self, message, *, step, metric, value, runs=None, last_good_step=None,
                 state=None, history=None):
        super().__init__(message)
        self.step = step
        self.metric = metric
        self.value = value
        self.runs = runs
        self.last_good_step = last_good_step
        self.state = state
        self.history = history


# --------------------------------------------------------------------------- host helpers

def _state_message(state, t_from, t_to, bad_runs, ckpt, last_ckpt) -> str:
    """Name the state leaves holding NaN/Inf after the chunk ``t_from .. t_to - 1``."""
    names = []
    for path, a in jax.tree_util.tree_flatten_with_path(state)[0]:
        if jnp.issubdtype(a.dtype, jnp.inexact) and not bool(jnp.all(jnp.isfinite(a))):
            names.append(jax.tree_util.keystr(path) or "state")
    where = f" in runs {bad_runs}" if bad_runs is not None else ""
    where_ck = ""
    if ckpt is not None and last_ckpt is not None:
        where_ck = f"; the last good checkpoint (step {last_ckpt}) is in {ckpt.directory}"
    return (
        f"fit: the state became non-finite (NaN/Inf in {names[:5]}) during steps "
        f"{t_from}..{t_to - 1}{where} while every checked metric stayed finite. Training "
        f"stopped; err.state holds the last good state (after {t_from} steps){where_ck}. "
        "Lower the learning rate, or check the step for division by zero / overflow."
    )


def _to_host(tree):
    return jax.tree_util.tree_map(np.asarray, jax.device_get(tree))


def _fmt(metrics: dict[str, np.ndarray]) -> dict[str, str]:
    out = {}
    for k, v in list(metrics.items())[:4]:
        v = np.asarray(v)
        out[k] = f"{float(np.nanmedian(v)) if v.size else float('nan'):.4g}"
    return out


def _check_metrics(metrics, length, R):
    """The first chunk's metrics: a dict of scalars per step (per run)."""
    if not isinstance(metrics, dict):
        raise TypeError(
            f"fit: step must return metrics as a dict of scalars, got {type(metrics).__name__}."
        )
    want = (length, R) if R is not None else (length,)
    for k, v in metrics.items():
        if np.shape(v) != want:
            raise ValueError(
                f"fit: metric {k!r} from step is not a scalar (per step it has shape "
                f"{np.shape(v)[1:]}); return scalars, e.g. jnp.mean(...)."
            )


def _nonfinite_metric(metrics, names, t_from, length, runs, where_ck):
    """``(message, step, metric, value, bad_runs)`` of the first NaN/Inf metric, or ``None``."""
    for k in names:
        if k not in metrics:
            raise KeyError(
                f"fit: check_finite names {k!r}, not a metric of step: {sorted(metrics)}."
            )
        v = np.asarray(metrics[k])
        if not np.issubdtype(v.dtype, np.inexact):
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
            )
            return msg, t_from + i, k, v[i], bad_runs
    return None


# --------------------------------------------------------------------------- fit

def fit(
    step: Callable[[Any, Any, jax.Array], tuple[Any, dict[str, jax.Array]]],
    state: Any,
    data: Any,
    *,
    key: jax.Array,
    steps: int | None = None,
    epochs: int | None = None,
    batch_size: int | None = None,
    eval_fn: Callable[[Any], dict[str, jax.Array]] | None = None,
    eval_every: int | None = None,
    eval_at_start: bool = False,
    progress: bool = True,
    desc: str = "fit",
    chunk_size: int | None = None,
    checkpoint_dir: str | os.PathLike | None = None,
    checkpoint_every: int | None = None,
    max_to_keep: int | None = 2,
    early_stopping: EarlyStopping | None = None,
    check_finite: bool | Sequence[str] = True,
    runs: bool = False,
    data_runs_axis: bool = False,
    mesh: jax.sharding.Mesh | None = None,
    data_axis: str = "data",
    state_sharding: Any = None,
    data_sharding: jax.sharding.Sharding | None = None,
    callback: Callable[[int, Any, dict[str, np.ndarray]], None] | None = None,
    checkpoint: Checkpointing | None = None,
    placement: Placement | None = None,
):
    """Run ``state_{t+1}, m_t = step(state_t, batch_t, key_t)`` for ``T`` steps.

    .. math::

        B_t = \\mathcal D[\\pi_{e}[pB:(p+1)B]],\\quad e = \\lfloor t/S \\rfloor,\\ p = t \\bmod S,
        \\qquad key_t = \\mathrm{fold\\_in}(k_{step}, t),

    where ``S = floor(n / B)`` steps make one epoch (the last ``n mod B`` samples of each
    epoch's permutation ``pi_e`` are dropped; they change every epoch) and ``pi_e`` is drawn
    from ``fold_in(k_data, e)``; ``(k_data, k_step) = split(key)``.  With ``batch_size=None``
    every step sees the full data set (``S = 1``).

    The data live on the device; shuffling and batch gathering run inside one jit-compiled
    ``lax.scan`` per chunk of steps, so the host synchronises once per chunk (to read the
    stacked metrics, update the progress bar, evaluate, checkpoint).  Chunk boundaries fall on
    every multiple of ``eval_every`` and ``checkpoint_every`` and on ``T``.

    Args:
      step: pure ``step(state, batch, key) -> (state, metrics)``; ``metrics`` a dict of scalar
        arrays; the returned state must have the input's structure, shapes and dtypes.
      state: initial state pytree (e.g. ``TrainState`` from :func:`optax_step`); with
        ``runs=True`` every leaf has a leading runs axis ``[R, ...]``.
      data: pytree of arrays with a leading sample axis ``[n, ...]`` (``[R, n, ...]`` with
        ``data_runs_axis=True``); batches keep this structure with ``n -> batch_size``.
      key: ``jax.random.key``; determines the data order and the step keys.
      steps / epochs: training length (exactly one); ``epochs`` means ``epochs * S`` steps.
      batch_size: minibatch size ``B`` (``None``: full batch).
      eval_fn: ``eval_fn(state) -> dict of scalars``, jit-compiled (vmapped with ``runs``),
        called after every ``eval_every`` updates and after the last one.
      eval_every: evaluation period in steps (default: only at the end).
      eval_at_start: also evaluate the initial state (``eval_step`` 0).
      progress: show a tqdm bar (steps, rate, latest metrics), updated once per chunk.
      chunk_size: steps per compiled chunk (default: about a tenth of the run, dividing the
        eval/checkpoint periods).  Distinct chunk lengths compile separately.
      checkpoint_dir: directory for orbax checkpoints.  If it already holds a checkpoint of
        the same run, training resumes from it (same final state as an uninterrupted run).
      checkpoint_every: checkpoint period in steps (default: only at the end).
      max_to_keep: number of checkpoints kept.
      early_stopping: an :class:`EarlyStopping` on an ``eval_fn`` metric.
      check_finite: raise :class:`NonFiniteError` when a training metric is NaN/Inf (``True``:
        all metrics; a sequence: those names; ``False``: never).  The data are checked once.
      runs: the state carries a leading runs axis and ``step``/``eval_fn`` are vmapped over it
        (seeds, learning rates, regularisation strengths swept in one compiled program); run
        ``r`` uses keys ``fold_in(split(k_step, R)[r], t)``; all runs share the data order.
      data_runs_axis: with ``runs``, the data also carry the leading runs axis.
      mesh: a ``jax.sharding.Mesh`` with a ``data_axis`` axis (use ``AxisType.Auto`` axes):
        batches are sharded over it, the state is replicated (or ``state_sharding``).
      data_axis: name of the mesh axis that shards the batch.
      state_sharding: a sharding (or pytree of shardings) for the state; default replicated.
      data_sharding: sharding of the stored data set (default replicated; pass
        ``NamedSharding(mesh, P(data_axis))`` for large data).  Global multi-process arrays
        (``jax.make_array_from_process_local_data``) are used as given.
      callback: ``callback(t, state, chunk_metrics)`` on the host after every chunk (after
        evaluation and checkpointing); ``t`` is the number of updates applied.
      checkpoint: :class:`Checkpointing` grouping ``checkpoint_dir``, ``checkpoint_every`` and
        ``max_to_keep`` (give either form).
      placement: :class:`Placement` grouping ``mesh``, ``data_axis``, ``state_sharding`` and
        ``data_sharding`` (give either form).

    Returns:
      ``(state, history)``: the final state (the best one with
      ``EarlyStopping(restore_best=True)``) and the history dict
      ``{"step": [T], "train": {name: [T] or [T, R]}, "eval_step": [E], "eval": {...}}``
      of numpy arrays (see :mod:`layerlab.loop._history`), plus ``"early_stopping"`` when
      early stopping was requested.

    Raises:
      NonFiniteError: a training metric (names the step and the metric) or the state (the
        chunk's steps and the leaves; checked once per chunk) became NaN/Inf.
      CheckpointMismatchError / CheckpointLockedError / CheckpointCorruptError: the
        checkpoint directory holds another run / is used by another live process / has no
        step that restores (see ``docs/loop.md``).
      ValueError / TypeError: inconsistent arguments, with what to change.
    """
    if checkpoint is not None:  # the grouped form of checkpoint_dir/_every/max_to_keep
        if checkpoint_dir is not None or checkpoint_every is not None:
            raise ValueError("fit: give checkpoint= or checkpoint_dir=/checkpoint_every=, "
                             "not both.")
        if not isinstance(checkpoint, Checkpointing):
            raise TypeError("fit: checkpoint must be a loop.Checkpointing, got "
                            f"{type(checkpoint).__name__}.")
        checkpoint_dir, checkpoint_every, max_to_keep = checkpoint
    if placement is not None:  # the grouped form of mesh/data_axis/state_/data_sharding
        if mesh is not None or state_sharding is not None or data_sharding is not None:
            raise ValueError("fit: give placement= or mesh=/state_sharding=/data_sharding=, "
                             "not both.")
        if not isinstance(placement, Placement):
            raise TypeError("fit: placement must be a loop.Placement, got "
                            f"{type(placement).__name__}.")
        mesh, data_axis, state_sharding, data_sharding = placement
    plan = check_fit_args(
        step, state, data, key=key, steps=steps, epochs=epochs, batch_size=batch_size,
        eval_fn=eval_fn, eval_every=eval_every, chunk_size=chunk_size,
        checkpoint_dir=checkpoint_dir, checkpoint_every=checkpoint_every,
        max_to_keep=max_to_keep, early_stopping=early_stopping, check_finite=check_finite,
        runs=runs, data_runs_axis=data_runs_axis, callback=callback)
    n, R, total, batch_size = plan.n, plan.R, plan.total, plan.batch_size
    data_host = data  # as given (hashed for the checkpoint fingerprint)
    placed = place(data, state, plan.key, mesh=mesh, data_axis=data_axis,
                   state_sharding=state_sharding, data_sharding=data_sharding,
                   batch_size=batch_size, n=n, data_runs_axis=data_runs_axis)
    data, state, key = placed.data, placed.state, placed.key
    if check_finite is not False and not bool(_all_finite(data)):
        raise ValueError(
            "fit: the data contain NaN or Inf values; clean or impute them first "
            "(or pass check_finite=False to skip all finiteness checks)."
        )
    data_key, step_key = jax.random.split(key)
    step_keys = jax.random.split(step_key, R) if runs else step_key

    # ---------------------------------------------------------------- resume
    es = early_stopping
    es_state = es_init(es, R) if es is not None else None
    best_state = state if (es is not None and es.restore_best) else None
    log = HistoryLog()
    t, ckpt, last_ckpt, stopped = 0, None, None, False
    if checkpoint_dir is not None:
        from layerlab.loop._checkpoint import checkpoint_meta, open_checkpoint, run_fingerprint

        fingerprint = run_fingerprint(  # hashes the data and the initial state, once
            step=step, state=state, data=data_host, key_data=jax.random.key_data(key),
            total=total, batch_size=batch_size, n=n, runs=R, data_runs_axis=data_runs_axis)
        ckpt, found = open_checkpoint(checkpoint_dir, max_to_keep, fingerprint,
                                      {"state": state, "best": best_state})
        if found is not None:
            t, arrays, meta, records = found
            last_ckpt, state = t, arrays["state"]
            if best_state is not None:
                best_state = arrays["best"]
            if records is None:  # older format: the whole history inside the meta
                log.load_jsonable(meta["history"])
            else:
                log.load_records(records)
            stopped = bool(meta.get("stopped", False))
            if es is not None and meta.get("early_stopping") is not None:
                es_state = es_from_json(meta["early_stopping"], es_state, stopped)
        ckpt.rewrite_history(log.records())  # drops rows newer than step t (once per resume)

    def assemble():
        return log.assemble(None if es is None else {"early_stopping": {
            "stopped": stopped, "best": es_state.best, "best_step": es_state.best_step,
            "metric": es.metric, "mode": es.mode}})

    def save(t_now):
        nonlocal last_ckpt
        ckpt.append_history(log.new_records())  # O(new rows)
        arrays = {"state": state, "best": best_state}
        ckpt.save(t_now, arrays, checkpoint_meta(
            t_now, fingerprint, log.rows(), arrays, stopped,
            None if es is None else es_to_json(es_state)))
        last_ckpt = t_now

    def evaluate(t_now):
        nonlocal best_state, stopped, es_state
        out = _run_eval(state, eval_fn=eval_fn, runs=runs)
        if not isinstance(out, dict):
            raise TypeError(
                f"fit: eval_fn must return a dict of scalars, got {type(out).__name__}."
            )
        out = _to_host(out)
        for k, v in out.items():
            if np.shape(v) != ((R,) if runs else ()):
                raise ValueError(
                    f"fit: eval_fn metric {k!r} has shape {np.shape(v)}; metrics must be scalars "
                    "(per run)."
                )
        log.add_eval(t_now, out)
        if es is not None:
            if es.metric not in out:
                raise KeyError(
                    f"fit: EarlyStopping.metric {es.metric!r} is not among the eval metrics "
                    f"{sorted(out)}."
                )
            es_state, improved = es_update(es, es_state, out[es.metric], t_now)
            if es.restore_best and np.any(improved):
                best_state = _select_best(jnp.asarray(improved), state, best_state, runs=runs)
            stopped = stopped or es_state.stopped
        if progress_bar is not None:
            evals = {f"eval_{k}": s for k, s in _fmt(out).items()}
            progress_bar.set_postfix({**_fmt(last_metrics), **evals})

    def finish():
        if ckpt is not None:
            ckpt.close()
        if progress_bar is not None:
            progress_bar.close()
        return (best_state if best_state is not None else state), assemble()

    if stopped or t >= total:
        progress_bar = None
        return finish()

    # ---------------------------------------------------------------- main loop
    from tqdm.auto import tqdm

    show = bool(progress) and jax.process_index() == 0
    progress_bar = tqdm(total=total, initial=t, desc=desc, disable=not show, dynamic_ncols=True,
                        unit="step", leave=True) if show else None
    last_metrics: dict[str, np.ndarray] = {}
    intervals = [k for k in (eval_every, checkpoint_every) if k is not None]
    chunk = int(chunk_size) if chunk_size is not None else _default_chunk(total, intervals)
    period = [chunk] + intervals
    if eval_fn is not None and eval_at_start and t == 0:
        evaluate(0)
    checked_metrics = False

    perm_box = [jnp.zeros((1 if batch_size is None else n,), jnp.int32),
                jnp.asarray(-1, jnp.int32)]  # last drawn permutation and its epoch

    def launch(t_from, st):
        """Dispatch the chunk starting at ``t_from`` (asynchronously; nothing is read back)."""
        t_to = min([_ceil_to(t_from, k) for k in period] + [total])
        try:
            st_new, m, perm_box[0], perm_box[1], ok = _run_chunk(
                st, jnp.asarray(t_from, jnp.int32), data, data_key, step_keys, *perm_box,
                step=step, length=t_to - t_from, batch_size=batch_size, steps_per_epoch=plan.spe,
                n=n, runs=runs, data_runs_axis=data_runs_axis,
                batch_sharding=placed.batch_sharding, state_sharding=placed.state_sharding,
                check_state=check_finite is not False,
            )
        except TypeError as e:
            if "carry" in str(e) or "scan" in str(e):
                raise TypeError(
                    "fit: step(state, batch, key) must return (new_state, metrics) with "
                    "new_state of the same pytree structure, shapes and dtypes as state. "
                    f"JAX said: {e}"
                ) from e
            raise
        return t_from, t_to, st, st_new, m, ok

    try:
        # One chunk of look-ahead: chunk k+1 is dispatched before chunk k's metrics are read,
        # so the device never waits for the host (progress, history, eval, checkpoints).
        inflight = launch(t, state) if t < total else None
        while inflight is not None:
            t_from, nxt, prev_state, new_state, metrics, state_ok = inflight
            inflight = launch(nxt, new_state) if nxt < total else None
            length = nxt - t_from
            metrics = _to_host(metrics)
            if not checked_metrics:
                _check_metrics(metrics, length, R if runs else None)
                checked_metrics = True
            if check_finite is not False:
                where_ck = ""
                if ckpt is not None and last_ckpt is not None:
                    where_ck = (f"; the last good checkpoint (step {last_ckpt}) is in "
                                f"{ckpt.directory}")
                names = list(metrics) if check_finite is True else list(check_finite)
                bad = _nonfinite_metric(metrics, names, t_from, length, runs, where_ck)
                state_ok = np.asarray(state_ok)
                if bad is None and not state_ok.all():
                    bad_runs = np.flatnonzero(~state_ok).tolist() if runs else None
                    bad = (_state_message(new_state, t_from, nxt, bad_runs, ckpt, last_ckpt),
                           t_from, "state", None, bad_runs)
                if bad is not None:
                    if ckpt is not None:
                        ckpt.wait()
                    msg, bad_step, name, value, bad_runs = bad
                    raise NonFiniteError(msg, step=bad_step, metric=name, value=value,
                                         runs=bad_runs, last_good_step=t_from,
                                         state=prev_state, history=assemble())
            log.add_train(np.arange(t_from, nxt, dtype=np.int64), metrics)
            last_metrics = {k: v[-1] for k, v in metrics.items()}
            t, state = nxt, new_state
            if progress_bar is not None:
                progress_bar.update(length)
                progress_bar.set_postfix(_fmt(last_metrics), refresh=False)
            if eval_fn is not None and ((eval_every is not None and t % eval_every == 0)
                                        or t == total):
                evaluate(t)
                if stopped:
                    inflight = None  # drop the look-ahead chunk: training ends here
            if ckpt is not None and ((checkpoint_every is not None and t % checkpoint_every == 0)
                                     or t == total or stopped):
                save(t)
            if callback is not None:
                callback(t, state, metrics)
    except BaseException:
        if progress_bar is not None:
            progress_bar.close()
            progress_bar = None
        if ckpt is not None:
            ckpt.close()
            ckpt = None
        raise
    if stopped and eval_fn is not None and progress_bar is not None:
        progress_bar.write(
            f"{desc}: early stopping at step {t} ({es.metric} best "
            f"{np.asarray(es_state.best).tolist()} at step "
            f"{np.asarray(es_state.best_step).tolist()})"
        )
    return finish()
