"""``fit``: drive a pure step over in-memory data inside jit-compiled ``lax.scan`` chunks.

The parts, one job each: :mod:`._args` (argument checks, grouped arguments),
:mod:`._placement` (mesh), :mod:`._chunks` (the compiled chunk runner and the launcher that
dispatches chunks), :mod:`._run` (the host side: history, evaluation, early stopping,
checkpoints, progress), :mod:`._nonfinite` (the NaN/Inf test and error),
:mod:`._checkpoint` (save, resume with the run fingerprint, lock, fallback),
:mod:`._early_stopping` (a pure update), :mod:`._history` (the history kept as chunks).
``fit`` below strings them together.
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from layerlab.loop._args import (
    DEFAULT_DATA_AXIS,
    DEFAULT_MAX_TO_KEEP,
    check_fit_args,
    grouped_checkpoint,
    grouped_placement,
)
from layerlab.loop._checkpoint import Checkpointing, run_fingerprint
from layerlab.loop._chunks import ChunkLauncher, _all_finite, default_chunking, is_traced_partial
from layerlab.loop._early_stopping import EarlyStopping
from layerlab.loop._nonfinite import NonFiniteError
from layerlab.loop._placement import Placement, place, place_bound
from layerlab.loop._run import FitRun

__all__ = ["fit", "EarlyStopping", "NonFiniteError"]


def _due(t: int, every: int | None, total: int) -> bool:
    """Whether a period-``every`` action (evaluation, checkpoint) falls after ``t`` updates."""
    return (every is not None and t % every == 0) or t == total


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
    max_to_keep: int | None = DEFAULT_MAX_TO_KEEP,
    early_stopping: EarlyStopping | None = None,
    check_finite: bool | Sequence[str] = True,
    runs: bool = False,
    data_runs_axis: bool = False,
    mesh: jax.sharding.Mesh | None = None,
    data_axis: str = DEFAULT_DATA_AXIS,
    state_sharding: Any = None,
    data_sharding: jax.sharding.Sharding | None = None,
    callback: Callable[[int, Any, dict[str, np.ndarray]], None] | None = None,
    checkpoint: Checkpointing | None = None,
    placement: Placement | None = None,
) -> tuple[Any, dict[str, Any]]:
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
      step: pure ``step(state, batch, key) -> (state, metrics)``; ``metrics`` a flat dict of
        scalar arrays keyed by strings (checked by tracing the step before training); the
        returned state must have the input's structure, shapes and dtypes.  As
        for ``eval_fn`` below, ``jax.tree_util.Partial(fn, a, b)`` (``fn(a, b, state, batch,
        key)``, arrays only) passes the bound arrays (fixed weights, a readout, ...) as traced
        inputs of the compiled chunk: one program per ``fn`` and shapes, shared by every
        ``fit`` call (e.g. the seeds of a sweep), without the arrays as program constants
        (they are tracers inside ``fn``: values the step reads on the host must stay in a
        closure or a ``functools.partial``; a checkpoint fingerprint hashes their contents).
      state: initial state pytree (e.g. ``TrainState`` from :func:`optax_step`); with
        ``runs=True`` every leaf has a leading runs axis ``[R, ...]``.
      data: pytree of arrays with a leading sample axis ``[n, ...]`` (``[R, n, ...]`` with
        ``data_runs_axis=True``); batches keep this structure with ``n -> batch_size``.
      key: ``jax.random.key``; determines the data order and the step keys.
      steps / epochs: training length (exactly one); ``epochs`` means ``epochs * S`` steps.
      batch_size: minibatch size ``B`` (``None``: full batch).
      eval_fn: ``eval_fn(state) -> dict of scalars``, jit-compiled (vmapped with ``runs``),
        called after every ``eval_every`` updates and after the last one.  A closure's
        captured arrays become constants of its program and every new closure compiles
        anew (a function's or ``partial``'s program is freed with it); bind evaluation
        data with ``jax.tree_util.Partial(fn, x_val, y_val)``
        (``fn(x_val, y_val, state)``, ``fn`` defined once; arrays only -- a Partial that
        binds Python values stays a static callable) to pass them as traced inputs, placed
        once beside the state (replicated over ``mesh``), so later ``fit`` calls with the
        same ``fn``, shapes, state structure and ``runs`` reuse the compiled program.
      eval_every: evaluation period in steps (default: only at the end).
      eval_at_start: also evaluate the initial state (``eval_step`` 0; needs ``eval_fn``).
      progress: show a tqdm bar (steps, rate, latest metrics), updated once per chunk.
      chunk_size: steps per compiled chunk (default: about a tenth of the run, dividing the
        eval/checkpoint periods; for co-prime periods, cut at their multiples with the
        remainders run as powers of two).  Distinct chunk lengths compile separately.
      checkpoint_dir: directory for orbax checkpoints.  If it already holds a checkpoint of
        the same run, training resumes from it (same final state as an uninterrupted run);
        one of another run (see ``docs/loop.md``: the fingerprint, the metric names) is
        refused before training.
      checkpoint_every: checkpoint period in steps (default: only at the end).
      max_to_keep: number of checkpoints kept in ``checkpoint_dir`` (default 2; ``None``:
        all); given without ``checkpoint_dir`` it is refused (``ValueError``).
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
        evaluation and checkpointing; where the chunk ended at a checkpoint, once that
        checkpoint is committed and before the next chunk is dispatched); ``t`` is the
        number of updates applied.
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

    Examples:
      Least squares ``y = 3 x`` by SGD in mini-batches of 8:

      >>> import jax, jax.numpy as jnp, optax
      >>> from layerlab import loop
      >>> x = jnp.linspace(-1.0, 1.0, 32)[:, None]
      >>> ts = loop.optax_step(lambda w, b: jnp.mean((b[0] * w - b[1]) ** 2), optax.sgd(0.5))
      >>> state, hist = loop.fit(ts.step, ts.init(jnp.zeros(())), (x, 3.0 * x),
      ...                        key=jax.random.key(0), steps=20, batch_size=8, progress=False)
      >>> hist["train"]["loss"].shape
      (20,)
      >>> round(float(state.params), 3)
      3.0
    """
    checkpoint = grouped_checkpoint(checkpoint, checkpoint_dir, checkpoint_every, max_to_keep)
    placement = grouped_placement(placement, mesh, data_axis, state_sharding, data_sharding)
    plan = check_fit_args(
        step, state, data, key=key, steps=steps, epochs=epochs, batch_size=batch_size,
        eval_fn=eval_fn, eval_every=eval_every, eval_at_start=eval_at_start,
        chunk_size=chunk_size,
        checkpoint_dir=checkpoint.directory, checkpoint_every=checkpoint.every,
        max_to_keep=checkpoint.max_to_keep, early_stopping=early_stopping,
        check_finite=check_finite, runs=runs, data_runs_axis=data_runs_axis, callback=callback)
    total, batch_size = plan.total, plan.batch_size
    placed = place(data, state, plan.key, placement, batch_size=batch_size, n=plan.n,
                   data_runs_axis=data_runs_axis)
    if eval_fn is not None and is_traced_partial(eval_fn):
        eval_fn = place_bound(eval_fn, placement.mesh)  # once, beside the state
    if is_traced_partial(step):
        step = place_bound(step, placement.mesh)
    if check_finite is not False and not bool(_all_finite(placed.data)):
        raise ValueError(
            "fit: the data contain NaN or Inf values; clean or impute them first "
            "(or pass check_finite=False to skip all finiteness checks)."
        )

    # ---------------------------------------------------------------- resume
    run = FitRun(placed.state, early_stopping=early_stopping, R=plan.R, runs=runs)
    try:  # from here on the checkpoint directory is locked: any error releases it
        if checkpoint.directory is not None:
            run.resume(checkpoint, run_fingerprint(  # hashes the data (as given) and the state
                step=step, state=placed.state, data=data,
                key_data=jax.random.key_data(placed.key), total=total, batch_size=batch_size,
                n=plan.n, runs=plan.R, data_runs_axis=data_runs_axis,
                early_stopping=early_stopping, eval_every=eval_every,
                eval_at_start=eval_at_start, eval_fn=eval_fn,
                key_impl=jax.random.key_impl(placed.key)),
                eval_at_start=eval_fn is not None and bool(eval_at_start))
        if run.stopped or run.t >= total:
            if total == 0 and eval_fn is not None and eval_at_start and not run.stopped:
                run.evaluate(eval_fn)  # steps=0: the asked-for evaluation of the initial state
        else:
            _train(run, step, placed, plan, total=total, batch_size=batch_size,
                   eval_fn=eval_fn, eval_every=eval_every, eval_at_start=eval_at_start,
                   checkpoint=checkpoint, chunk_size=chunk_size, runs=runs,
                   data_runs_axis=data_runs_axis, check_finite=check_finite,
                   callback=callback, progress=progress, desc=desc)
    except BaseException:
        run.abort()
        raise
    return run.finish()


def _train(run, step, placed, plan, *, total, batch_size, eval_fn, eval_every, eval_at_start,
           checkpoint, chunk_size, runs, data_runs_axis, check_finite, callback, progress,
           desc) -> None:
    """The main loop of :func:`fit` (``run`` resumed, its directory locked by the caller)."""
    intervals = [k for k in (eval_every, checkpoint.every) if k is not None]
    chunk, ragged = ((int(chunk_size), False) if chunk_size is not None
                     else default_chunking(total, intervals))
    chunks = ChunkLauncher(
        step, placed.data, placed.key, total=total, chunk=chunk, ragged=ragged,
        intervals=intervals, batch_size=batch_size, steps_per_epoch=plan.spe, n=plan.n,
        runs=runs, data_runs_axis=data_runs_axis, batch_sharding=placed.batch_sharding,
        state_sharding=placed.state_sharding, check_state=check_finite is not False, R=plan.R)
    shapes, length = chunks.metric_shapes(run.t, run.state)  # the step traced, not run
    run.check_step(shapes, length, check_finite)
    evals = run.check_eval(eval_fn) if eval_fn is not None else None
    if run.ckpt is not None:
        run.check_resumed_names(list(shapes), evals)  # raises before training
    run.open_progress(progress, total, desc)
    if eval_fn is not None and eval_at_start and run.t == 0:
        run.evaluate(eval_fn)
    # One chunk of look-ahead: chunk k+1 is dispatched before chunk k's metrics are read,
    # so the device never waits for the host (progress, history, evaluation) -- except
    # where chunk k ends at a checkpoint: then chunk k is read, evaluated, saved and passed
    # to the callback first and chunk k+1 dispatched after.  Otherwise the evaluation and
    # save queue behind the look-ahead chunk (on CPU always: seen on the multi-hour DGL
    # runs), and a stop loses two checkpoint intervals instead of about one.  The chunks,
    # keys and results are the same either way; the device idles during the save.
    # Checkpointing.min_interval_s: a periodic save due sooner than that after the previous
    # one (or this call's start) is skipped; decided when its chunk is dispatched
    last_save = time.monotonic()

    def save_due(t: int) -> bool:
        if run.ckpt is None or not _due(t, checkpoint.every, total):
            return False
        gap = checkpoint.min_interval_s
        return t == total or gap is None or time.monotonic() - last_save >= float(gap)

    inflight = chunks.launch(run.t, run.state)
    while inflight is not None:
        done = inflight
        save_first = save_due(done.t_to)
        inflight = None if save_first else chunks.launch(done.t_to, done.state)
        metrics = run.take_chunk(done, check_finite)  # raises NonFiniteError
        if eval_fn is not None and _due(run.t, eval_every, total):
            run.evaluate(eval_fn)
            if run.stopped:
                inflight = None  # drop the look-ahead chunk: training ends here
        if run.ckpt is not None and (save_first or run.stopped):
            run.save()
            last_save = time.monotonic()
            if callback is not None:  # orbax saves asynchronously: the callback sees a step
                run.ckpt.wait()  # only once its checkpoint is committed (docs/loop.md)
        if callback is not None:
            callback(run.t, run.state, metrics)
        if save_first and not run.stopped:  # after the callback: its files match the save
            inflight = chunks.launch(run.t, run.state)
    run.note_early_stop(desc)
