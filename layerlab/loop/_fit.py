"""``fit``: drive a pure step over in-memory data inside jit-compiled ``lax.scan`` chunks."""
from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from layerlab._checks import check_int, check_number
from layerlab.loop._history import empty_history, history_from_jsonable

__all__ = ["fit", "EarlyStopping", "NonFiniteError"]


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


# --------------------------------------------------------------------------- compiled parts

_MAX_PERM_ENTRIES = 1 << 24  # int32 entries of precomputed permutations per chunk (64 MiB)


def _epoch_perm(data_key, epoch, n):
    return jax.random.permutation(jax.random.fold_in(data_key, epoch), n).astype(jnp.int32)


@partial(
    jax.jit,
    static_argnames=("step", "length", "batch_size", "steps_per_epoch", "n", "runs",
                     "data_runs_axis", "batch_sharding", "state_sharding", "check_state"),
)
def _run_chunk(state, t0, data, data_key, step_keys, prev_perm, prev_epoch, *, step, length,
               batch_size,
               steps_per_epoch, n, runs, data_runs_axis, batch_sharding, state_sharding,
               check_state=False):
    state, metrics, last, e_last = _run_chunk_body(
        state, t0, data, data_key, step_keys, prev_perm, prev_epoch, step=step, length=length,
        batch_size=batch_size, steps_per_epoch=steps_per_epoch, n=n, runs=runs,
        data_runs_axis=data_runs_axis, batch_sharding=batch_sharding,
        state_sharding=state_sharding)
    # one reduction per chunk (read back with the metrics: no extra host sync)
    ok = _finite_flags(state, runs) if check_state else jnp.asarray(True)
    return state, metrics, last, e_last, ok


def _finite_flags(tree, runs):
    """``all(isfinite)`` over the float leaves of ``tree``: ``[]`` or per run ``[R]``."""
    flags = []
    for a in jax.tree_util.tree_leaves(tree):
        if not jnp.issubdtype(a.dtype, jnp.inexact):
            continue
        f = jnp.isfinite(a)
        flags.append(jnp.all(f.reshape(f.shape[0], -1), axis=1) if runs and a.ndim
                     else jnp.all(f))
    if not flags:
        return jnp.asarray(True)
    out = flags[0]
    for f in flags[1:]:
        out = out & f
    return out


def _run_chunk_body(state, t0, data, data_key, step_keys, prev_perm, prev_epoch, *, step,
                    length, batch_size, steps_per_epoch, n, runs, data_runs_axis,
                    batch_sharding, state_sharding):
    """``length`` steps ``t0 .. t0+length-1`` of ``step`` in one ``lax.scan``.

    Step ``t`` uses the batch ``perm_e[p*B:(p+1)*B]`` with ``e = t // S``, ``p = t % S``
    (``S`` steps per epoch, ``perm_e`` a permutation drawn from ``fold_in(data_key, e)``) and
    the key ``fold_in(step_key, t)`` (per run with ``runs``).  Both depend only on ``t``, so
    any chunking (and a resumed run) sees exactly the same batches and keys.  ``prev_perm`` is
    the permutation of epoch ``prev_epoch`` (from the previous chunk), reused when this chunk
    starts inside that epoch, so every permutation is drawn once per run.

    Returns ``(state, metrics, last_perm, last_epoch)``.
    """
    full = batch_size is None
    axis = 1 if data_runs_axis else 0
    if runs:
        vstep = jax.vmap(step, in_axes=(0, 0 if data_runs_axis else None, 0))
        fold = jax.vmap(jax.random.fold_in, in_axes=(0, None))
    if state_sharding is not None:
        sh_leaves, sh_def = state_sharding
        state_sh_tree = jax.tree_util.tree_unflatten(sh_def, sh_leaves)

    # All permutations a chunk needs are drawn up front, [E, n] for the E epochs it touches
    # (cheaper than a lax.cond inside the scan); past _MAX_PERM_ENTRIES a cond redraws them.
    n_epochs = (length - 1) // steps_per_epoch + 2
    precompute = not full and n_epochs * n <= _MAX_PERM_ENTRIES
    e0 = t0 // steps_per_epoch

    def gather(idx):
        return jax.tree_util.tree_map(lambda a: jnp.take(a, idx, axis=axis, mode="clip"), data)

    def advance(st, batch, t):
        if batch_sharding is not None:
            batch = jax.tree_util.tree_map(
                lambda a: lax.with_sharding_constraint(a, batch_sharding), batch
            )
        if runs:
            new, metrics = vstep(st, batch, fold(step_keys, t))
        else:
            new, metrics = step(st, batch, jax.random.fold_in(step_keys, t))
        if state_sharding is not None:
            new = lax.with_sharding_constraint(new, state_sh_tree)
        return new, metrics

    ts = t0 + jnp.arange(length, dtype=t0.dtype)
    if full:
        def body_full(st, t):
            return advance(st, data, t)

        state, metrics = lax.scan(body_full, state, ts)
        return state, metrics, prev_perm, prev_epoch
    first = lax.cond(prev_epoch == e0, lambda: prev_perm, lambda: _epoch_perm(data_key, e0, n))
    e_last = (t0 + length - 1) // steps_per_epoch
    if precompute:
        need = e_last - e0 + 1

        def draw(j):  # epochs e0+1 .. e_last; the bound n_epochs may exceed them by one
            return lax.cond(j < need, lambda: _epoch_perm(data_key, e0 + j, n),
                            lambda: jnp.zeros((n,), jnp.int32))

        rest = lax.map(draw, jnp.arange(1, n_epochs, dtype=e0.dtype))
        perms = jnp.concatenate([first[None], rest], axis=0)

        def body_pre(st, t):
            row, pos = t // steps_per_epoch - e0, t % steps_per_epoch
            idx = lax.dynamic_slice(perms, (row, pos * batch_size), (1, batch_size))[0]
            return advance(st, gather(idx), t)

        state, metrics = lax.scan(body_pre, state, ts)
        last = lax.dynamic_index_in_dim(perms, need - 1, axis=0, keepdims=False)
        return state, metrics, last, e_last

    def body_cond(carry, t):
        st, perm = carry
        epoch, pos = t // steps_per_epoch, t % steps_per_epoch
        perm = lax.cond(pos == 0, lambda: _epoch_perm(data_key, epoch, n), lambda: perm)
        idx = lax.dynamic_slice_in_dim(perm, pos * batch_size, batch_size)
        st, metrics = advance(st, gather(idx), t)
        return (st, perm), metrics

    (state, last), metrics = lax.scan(body_cond, (state, first), ts)
    return state, metrics, last, e_last


@partial(jax.jit, static_argnames=("eval_fn", "runs"))
def _run_eval(state, *, eval_fn, runs):
    return jax.vmap(eval_fn)(state) if runs else eval_fn(state)


@partial(jax.jit, static_argnames=("runs",))
def _select_best(improved, new, best, *, runs):
    if not runs:
        return jax.tree_util.tree_map(lambda a, b: jnp.where(improved, a, b), new, best)

    def sel(a, b):
        m = improved.reshape(improved.shape + (1,) * (a.ndim - 1))
        return jnp.where(m, a, b)

    return jax.tree_util.tree_map(sel, new, best)


@jax.jit
def _all_finite(tree):
    leaves = [jnp.all(jnp.isfinite(a)) for a in jax.tree_util.tree_leaves(tree)
              if jnp.issubdtype(a.dtype, jnp.inexact)]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.asarray(True)


# --------------------------------------------------------------------------- host helpers

def _records(chunk_steps, chunks_train, chunk_eval_steps, chunks_eval) -> list[dict]:
    """History chunks as the records of ``history.jsonl``."""
    recs = [{"kind": "train", "step": st, "metrics": m}
            for st, m in zip(chunk_steps, chunks_train, strict=True)]
    return recs + [{"kind": "eval", "step": st, "metrics": m}
                   for st, m in zip(chunk_eval_steps, chunks_eval, strict=True)]


def _load_records(records, chunk_steps, chunks_train, eval_steps, chunk_eval_steps,
                  chunks_eval) -> None:
    """Inverse of :func:`_records` (JSON ``None`` back to NaN), appending to the lists."""
    from layerlab.loop._history import _arr

    for r in records:
        metrics = {k: _arr(v) for k, v in r["metrics"].items()}
        if r["kind"] == "train":
            chunk_steps.append(np.asarray(r["step"], np.int64))
            chunks_train.append(metrics)
        else:
            steps_r = [int(v) for v in r["step"]]
            chunk_eval_steps.append(steps_r)
            eval_steps.extend(steps_r)
            chunks_eval.append(metrics)


def _ceil_to(t: int, k: int) -> int:
    return (t // k + 1) * k


def _default_chunk(total: int, intervals: Sequence[int]) -> int:
    target = max(1, math.ceil(total / 10))
    if not intervals:
        return target
    g = 0
    for k in intervals:
        g = math.gcd(g, int(k))
    if g <= target:
        return g
    # the largest divisor of g that is <= target keeps every chunk the same length
    best = 1
    for d in range(1, int(math.isqrt(g)) + 1):
        if g % d == 0:
            for c in (d, g // d):
                if c <= target and c > best:
                    best = c
    return best if best * 4 >= target else g


def _as_key(key):
    if key is None:
        raise ValueError(
            "fit: pass key=jax.random.key(seed); it drives shuffling and the step keys."
        )
    key = jnp.asarray(key) if not isinstance(key, jax.Array) else key
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        if key.shape != ():
            raise ValueError(f"fit: key must be a single PRNG key, got shape {key.shape}.")
        return key
    if key.dtype == jnp.uint32 and key.shape == (2,):
        return jax.random.wrap_key_data(key)
    raise TypeError(
        f"fit: key must be jax.random.key(seed), got dtype {key.dtype} shape {key.shape}."
    )


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


def _expand_sharding(sharding, tree, what):
    """A single sharding -> one per leaf; a pytree of shardings must match ``tree``."""
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    if isinstance(sharding, jax.sharding.Sharding):
        return tuple(sharding for _ in leaves), treedef
    sh_leaves, sh_def = jax.tree_util.tree_flatten(
        sharding, is_leaf=lambda x: isinstance(x, jax.sharding.Sharding)
    )
    if sh_def != treedef:
        raise ValueError(
            f"fit: {what} must be one jax.sharding.Sharding or a pytree of shardings with the "
            f"same structure as the state; got structure {sh_def} for state {treedef}."
        )
    return tuple(sh_leaves), treedef


def _put(a, sh):
    """Place one leaf with sharding ``sh``; works when ``sh`` spans several processes."""
    if isinstance(a, jax.Array) and not a.is_fully_addressable:
        return a  # already a global multi-process array: keep the caller's layout
    if sh.is_fully_addressable:
        return jax.device_put(a if isinstance(a, jax.Array) else jnp.asarray(a), sh)
    # multi-process: every process holds the same host value and contributes its local shards
    if isinstance(a, jax.Array) and jnp.issubdtype(a.dtype, jax.dtypes.prng_key):
        raw = np.asarray(jax.random.key_data(a))
        glob = jax.make_array_from_callback(raw.shape, sh, lambda idx: raw[idx])
        return jax.random.wrap_key_data(glob, impl=jax.random.key_impl(a))
    host = np.asarray(a)
    if host.dtype == np.float64 and not jax.config.jax_enable_x64:
        host = host.astype(np.float32)
    return jax.make_array_from_callback(host.shape, sh, lambda idx: host[idx])


def _place(tree, sharding):
    """Place every leaf (one sharding, or a pytree of shardings matching ``tree``)."""
    if isinstance(sharding, jax.sharding.Sharding):
        return jax.tree_util.tree_map(lambda a: _put(a, sharding), tree)
    return jax.tree_util.tree_map(_put, tree, sharding)


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

    Returns:
      ``(state, history)``: the final state (the best one with
      ``EarlyStopping(restore_best=True)``) and the history dict
      ``{"step": [T], "train": {name: [T] or [T, R]}, "eval_step": [E], "eval": {...}}``
      of numpy arrays (see :mod:`layerlab.loop._history`), plus ``"early_stopping"`` when
      early stopping was requested.

    Raises:
      NonFiniteError: a training metric became NaN/Inf (names the step and the metric).
      ValueError / TypeError: inconsistent arguments, with what to change.
    """
    # ---------------------------------------------------------------- validate arguments
    if not callable(step):
        raise TypeError(
            "fit: step must be callable step(state, batch, key) -> (state, metrics); "
            "for an optax optimizer use layerlab.loop.optax_step(loss_fn, opt).step."
        )
    key = _as_key(key)
    if data_runs_axis and not runs:
        raise ValueError("fit: data_runs_axis=True needs runs=True.")
    data_leaves = jax.tree_util.tree_leaves(data)
    if not data_leaves:
        raise ValueError("fit: data is empty; pass a pytree of arrays such as (x, y).")
    axis = 1 if data_runs_axis else 0
    shapes = [np.shape(a) for a in data_leaves]
    if any(len(s) <= axis for s in shapes):
        raise ValueError(f"fit: every data array needs a sample axis {axis}; got shapes {shapes}.")
    n = shapes[0][axis]
    if any(s[axis] != n for s in shapes):
        raise ValueError(
            f"fit: data arrays disagree on the number of samples (axis {axis}): shapes {shapes}."
        )
    if n == 0:
        raise ValueError(
            f"fit: data has 0 samples (shapes {shapes}); pass at least one sample."
        )
    R = None
    state_leaves = jax.tree_util.tree_leaves(state)
    if runs:
        if not state_leaves or any(np.ndim(a) == 0 for a in state_leaves):
            raise ValueError(
                "fit(runs=True): every state leaf needs a leading runs axis [R, ...]; build the "
                "state with jax.vmap(init)(...) over the runs."
            )
        R = int(np.shape(state_leaves[0])[0])
        if any(np.shape(a)[0] != R for a in state_leaves):
            raise ValueError(
                "fit(runs=True): state leaves disagree on the runs axis: "
                f"{sorted({np.shape(a)[0] for a in state_leaves})}."
            )
        if data_runs_axis and any(s[0] != R for s in shapes):
            raise ValueError(f"fit: data_runs_axis=True but data shapes {shapes} lack R={R} first.")
    if batch_size is None:
        spe = 1
    else:
        batch_size = check_int(batch_size, "batch_size", fn="fit")
        if not 1 <= batch_size <= n:
            raise ValueError(f"fit: batch_size={batch_size} must be in [1, n={n}] (or None).")
        spe = n // batch_size
    if (steps is None) == (epochs is None):
        raise ValueError("fit: give exactly one of steps= or epochs=.")
    if steps is not None:
        total = check_int(steps, "steps", fn="fit", min_value=0)
    else:
        total = check_int(epochs, "epochs", fn="fit", min_value=0) * spe
    for name, v in (("eval_every", eval_every), ("checkpoint_every", checkpoint_every),
                    ("chunk_size", chunk_size)):
        check_int(v, name, fn="fit", min_value=1, allow_none=True)
    check_int(max_to_keep, "max_to_keep", fn="fit", min_value=1, allow_none=True)
    if not (isinstance(check_finite, bool) or (
            isinstance(check_finite, Sequence) and not isinstance(check_finite, str))):
        raise TypeError(
            "fit: check_finite must be True, False or a sequence of metric names, got "
            f"{check_finite!r}."
        )
    if eval_fn is not None and not callable(eval_fn):
        raise TypeError(f"fit: eval_fn must be callable, got {type(eval_fn).__name__}.")
    if callback is not None and not callable(callback):
        raise TypeError(f"fit: callback must be callable, got {type(callback).__name__}.")
    if eval_every is not None and eval_fn is None:
        raise ValueError("fit: eval_every given without eval_fn.")
    if early_stopping is not None:
        if eval_fn is None:
            raise ValueError("fit: early_stopping needs eval_fn (it watches an eval metric).")
        if early_stopping.mode not in ("min", "max"):
            raise ValueError(
                f"fit: EarlyStopping.mode must be 'min' or 'max', got {early_stopping.mode!r}."
            )
        check_int(early_stopping.patience, "EarlyStopping.patience", fn="fit", min_value=1)
        check_number(early_stopping.min_delta, "EarlyStopping.min_delta", fn="fit",
                     min_value=0.0)
    if checkpoint_every is not None and checkpoint_dir is None:
        raise ValueError("fit: checkpoint_every given without checkpoint_dir.")

    # ---------------------------------------------------------------- placement
    data_host = data  # as given (hashed for the checkpoint fingerprint)
    batch_sharding = None
    state_sh = None
    if mesh is not None:
        from jax.sharding import NamedSharding
        from jax.sharding import PartitionSpec as P

        if data_axis not in mesh.axis_names:
            raise ValueError(
                f"fit: mesh axes {mesh.axis_names} have no {data_axis!r} axis; build it with "
                f"jax.make_mesh((ndev,), ('{data_axis}',), "
                "axis_types=(jax.sharding.AxisType.Auto,))."
            )
        ndata = mesh.shape[data_axis]
        b = n if batch_size is None else batch_size
        if b % ndata:
            raise ValueError(
                f"fit: the batch ({b} samples) must divide evenly over the {ndata} devices of "
                f"mesh axis {data_axis!r}; choose batch_size as a multiple of {ndata}."
            )
        batch_sharding = NamedSharding(mesh, P(None, data_axis) if data_runs_axis else P(data_axis))
        replicated = NamedSharding(mesh, P())
        data = _place(data, data_sharding if data_sharding is not None else replicated)
        state_sh = _expand_sharding(
            state_sharding if state_sharding is not None else replicated, state, "state_sharding"
        )
        state = _place(state, jax.tree_util.tree_unflatten(state_sh[1], list(state_sh[0])))
        key = _put(key, replicated)
    else:
        if state_sharding is not None or data_sharding is not None:
            raise ValueError("fit: state_sharding/data_sharding need mesh=.")
        data = jax.tree_util.tree_map(
            lambda a: a if isinstance(a, jax.Array) else jnp.asarray(a), data
        )
    if check_finite is not False and not bool(_all_finite(data)):
        raise ValueError(
            "fit: the data contain NaN or Inf values; clean or impute them first "
            "(or pass check_finite=False to skip all finiteness checks)."
        )

    data_key, step_key = jax.random.split(key)
    step_keys = jax.random.split(step_key, R) if runs else step_key

    # ---------------------------------------------------------------- checkpoint / resume
    chunks_train: list[dict[str, np.ndarray]] = []
    chunks_eval: list[dict[str, np.ndarray]] = []
    chunk_steps: list[np.ndarray] = []
    eval_steps: list[int] = []
    chunk_eval_steps: list[list[int]] = []  # the steps of each chunks_eval entry
    es = early_stopping
    es_best = es_wait = es_best_step = None
    best_state = None
    if es is not None:
        shape = (R,) if runs else ()
        es_best = np.full(shape, np.inf if es.mode == "min" else -np.inf)
        es_wait = np.zeros(shape, np.int64)
        es_best_step = np.zeros(shape, np.int64)
        if es.restore_best:
            best_state = state
    stopped = False
    t = 0
    ckpt = None
    last_ckpt = None
    written = [0, 0]  # chunks_train / chunks_eval entries already appended to history.jsonl
    if checkpoint_dir is not None:
        from layerlab.loop._checkpoint import Checkpointer, resume, run_fingerprint

        # the fingerprint hashes the data and the initial state once per call
        fingerprint = run_fingerprint(
            step=step, state=state, data=data_host, key_data=jax.random.key_data(key),
            total=total, batch_size=batch_size, n=n, runs=R, data_runs_axis=data_runs_axis,
        )
        ckpt = Checkpointer(checkpoint_dir, max_to_keep=max_to_keep,
                            writer=jax.process_index() == 0)
        try:
            found = resume(ckpt, fingerprint, {"state": state, "best": best_state})
        except BaseException:
            ckpt.close()
            raise
        if found is not None:
            t, arrays, meta, records = found
            state = arrays["state"]
            if es is not None and es.restore_best:
                best_state = arrays["best"]
            last_ckpt = t
            if records is None:  # older format: the whole history in the meta
                h = history_from_jsonable(meta["history"])
                if h["step"].size:
                    chunk_steps.append(h["step"])
                    chunks_train.append(h["train"])
                eval_steps.extend(int(s) for s in h["eval_step"])
                if h["eval_step"].size:
                    chunks_eval.append(h["eval"])
                    chunk_eval_steps.append([int(s) for s in h["eval_step"]])
                records = _records(chunk_steps, chunks_train, chunk_eval_steps, chunks_eval)
            else:
                _load_records(records, chunk_steps, chunks_train, eval_steps,
                              chunk_eval_steps, chunks_eval)
            ckpt.rewrite_history(records)  # drop rows newer than step t (once per resume)
            written[:] = [len(chunks_train), len(chunks_eval)]
            if es is not None and meta.get("early_stopping") is not None:
                e = meta["early_stopping"]
                es_best = np.asarray(e["best"], np.float64).reshape(es_best.shape)
                es_wait = np.asarray(e["wait"], np.int64).reshape(es_wait.shape)
                es_best_step = np.asarray(e["best_step"], np.int64).reshape(es_best.shape)
            stopped = bool(meta.get("stopped", False))
        else:
            ckpt.rewrite_history([])

    def assemble():
        hist = empty_history()
        if chunk_steps:
            hist["step"] = np.concatenate(chunk_steps)
            names = chunks_train[-1].keys()
            hist["train"] = {k: np.concatenate([c[k] for c in chunks_train]) for k in names}
        if eval_steps:
            hist["eval_step"] = np.asarray(eval_steps, np.int64)
            names = chunks_eval[-1].keys()
            hist["eval"] = {k: np.concatenate([c[k] for c in chunks_eval]) for k in names}
        if es is not None:
            hist["early_stopping"] = {
                "stopped": stopped, "best": es_best, "best_step": es_best_step,
                "metric": es.metric, "mode": es.mode,
            }
        return hist

    def save(t_now):
        nonlocal last_ckpt
        if ckpt is None:
            return
        from layerlab.loop._checkpoint import content_hash

        # history: append only what is new since the last save (O(new rows))
        recs = [{"kind": "train", "step": st, "metrics": m}
                for st, m in zip(chunk_steps[written[0]:], chunks_train[written[0]:],
                                 strict=True)]
        recs += [{"kind": "eval", "step": st, "metrics": m}
                 for st, m in zip(chunk_eval_steps[written[1]:], chunks_eval[written[1]:],
                                  strict=True)]
        ckpt.append_history(recs)
        written[:] = [len(chunks_train), len(chunks_eval)]
        arrays = {"state": state, "best": best_state}
        meta = {
            "step": int(t_now),
            "fingerprint": fingerprint,
            "history_rows": int(sum(len(c) for c in chunk_steps)),
            "state_hash": content_hash(arrays),
            "stopped": bool(stopped),
            "early_stopping": None if es is None else {
                "best": np.asarray(es_best).ravel().tolist(),
                "wait": np.asarray(es_wait).ravel().tolist(),
                "best_step": np.asarray(es_best_step).ravel().tolist(),
            },
        }
        ckpt.save(t_now, arrays, meta)
        last_ckpt = t_now

    def evaluate(t_now):
        nonlocal best_state, stopped, es_best, es_wait, es_best_step
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
        eval_steps.append(int(t_now))
        chunk_eval_steps.append([int(t_now)])
        chunks_eval.append({k: np.asarray(v)[None] for k, v in out.items()})
        if es is not None:
            if es.metric not in out:
                raise KeyError(
                    f"fit: EarlyStopping.metric {es.metric!r} is not among the eval metrics "
                    f"{sorted(out)}."
                )
            v = np.asarray(out[es.metric], np.float64)
            if es.mode == "min":
                improved = v < es_best - es.min_delta
            else:
                improved = v > es_best + es.min_delta
            es_best = np.where(improved, v, es_best)
            es_best_step = np.where(improved, t_now, es_best_step)
            es_wait = np.where(improved, 0, es_wait + 1)
            if es.restore_best and np.any(improved):
                best_state = _select_best(jnp.asarray(improved), state, best_state, runs=runs)
            if np.all(es_wait >= es.patience):
                stopped = True
        if progress_bar is not None:
            evals = {f"eval_{k}": s for k, s in _fmt(out).items()}
            progress_bar.set_postfix({**_fmt(last_metrics), **evals})

    def finish():
        if ckpt is not None:
            ckpt.close()
        if progress_bar is not None:
            progress_bar.close()
        final = best_state if (es is not None and es.restore_best) else state
        return final, assemble()

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
                step=step, length=t_to - t_from, batch_size=batch_size, steps_per_epoch=spe, n=n,
                runs=runs, data_runs_axis=data_runs_axis, batch_sharding=batch_sharding,
                state_sharding=state_sh, check_state=check_finite is not False,
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
                if not isinstance(metrics, dict):
                    raise TypeError(
                        "fit: step must return metrics as a dict of scalars, got "
                        f"{type(metrics).__name__}."
                    )
                want = (length, R) if runs else (length,)
                for k, v in metrics.items():
                    if np.shape(v) != want:
                        raise ValueError(
                            f"fit: metric {k!r} from step is not a scalar (per step it has shape "
                            f"{np.shape(v)[1:]}); return scalars, e.g. jnp.mean(...)."
                        )
                checked_metrics = True
            if check_finite is not False:
                names = list(metrics) if check_finite is True else list(check_finite)
                for k in names:
                    if k not in metrics:
                        raise KeyError(
                            f"fit: check_finite names {k!r}, not a metric of step: "
                            f"{sorted(metrics)}."
                        )
                    v = np.asarray(metrics[k])
                    if not np.issubdtype(v.dtype, np.inexact):
                        continue
                    bad = ~np.isfinite(v)
                    if bad.any():
                        rows = bad.reshape(length, -1).any(axis=1)
                        i = int(np.argmax(rows))
                        bad_runs = np.flatnonzero(bad[i]).tolist() if runs else None
                        where = f" in runs {bad_runs}" if runs else ""
                        where_ck = ""
                        if ckpt is not None and last_ckpt is not None:
                            where_ck = (f"; the last good checkpoint (step {last_ckpt}) is in "
                                        f"{ckpt.directory}")
                        msg = (
                            f"fit: training metric {k!r} became non-finite ({v[i].tolist()}) "
                            f"at step {t_from + i}{where}. Training stopped; err.state holds the "
                            f"last good state (after {t_from} steps){where_ck}. Lower the learning "
                            "rate, check the data and the loss for log(0)/division by zero"
                            + (", or pass check_finite=False to let a sweep continue past "
                               "diverging runs." if runs else ".")
                        )
                        if ckpt is not None:
                            ckpt.wait()
                        raise NonFiniteError(msg, step=t_from + i, metric=k, value=v[i],
                                             runs=bad_runs, last_good_step=t_from,
                                             state=prev_state, history=assemble())
                state_ok = np.asarray(state_ok)
                if not state_ok.all():
                    if ckpt is not None:
                        ckpt.wait()
                    bad_runs = np.flatnonzero(~state_ok).tolist() if runs else None
                    raise NonFiniteError(
                        _state_message(new_state, t_from, nxt, bad_runs, ckpt, last_ckpt),
                        step=t_from, metric="state", value=None, runs=bad_runs,
                        last_good_step=t_from, state=prev_state, history=assemble())
            chunk_steps.append(np.arange(t_from, nxt, dtype=np.int64))
            chunks_train.append(metrics)
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
            f"{desc}: early stopping at step {t} ({es.metric} best {np.asarray(es_best).tolist()} "
            f"at step {np.asarray(es_best_step).tolist()})"
        )
    return finish()
