"""The compiled parts of :func:`layerlab.loop.fit`: the chunk runner and its permutations.

One ``jax.jit``-compiled ``lax.scan`` runs a chunk of steps; batches are gathered on device
from per-epoch permutations drawn from ``fold_in(data_key, epoch)``; the chunk also returns a
finiteness flag of the final state (one reduction, read back with the metrics).  Plus the
jitted evaluation, best-state selection and data finiteness test, and the host-side choice of
chunk lengths, and :class:`ChunkLauncher`, which dispatches the chunks of one ``fit`` call in
order.
"""
from __future__ import annotations

import contextlib
import functools
import math
import types
import weakref
from collections.abc import Sequence
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from layerlab._checks import as_device_array

_MAX_PERM_ENTRIES = 1 << 24  # int32 entries of precomputed permutations per chunk (64 MiB)


def _epoch_perm(data_key, epoch, n):
    return jax.random.permutation(jax.random.fold_in(data_key, epoch), n).astype(jnp.int32)


_CHUNK_STATIC = ("length", "batch_size", "steps_per_epoch", "n", "runs", "data_runs_axis",
                 "batch_sharding", "state_sharding", "check_state")


def _run_chunk_impl(state, t0, data, data_key, step_keys, prev_perm, prev_epoch, step, *,
                    length, batch_size, steps_per_epoch, n, runs, data_runs_axis, batch_sharding,
                    state_sharding, check_state=False):
    state, metrics, last, e_last = _run_chunk_body(
        state, t0, data, data_key, step_keys, prev_perm, prev_epoch, step=step, length=length,
        batch_size=batch_size, steps_per_epoch=steps_per_epoch, n=n, runs=runs,
        data_runs_axis=data_runs_axis, batch_sharding=batch_sharding,
        state_sharding=state_sharding)
    # one reduction per chunk (read back with the metrics: no extra host sync)
    ok = _finite_flags(state, runs) if check_state else jnp.asarray(True)
    return state, metrics, last, e_last, ok


# ``step`` static: a plain callable is part of the compile-cache key (a new closure compiles
# anew; arrays it closes over become constants of the program).  Used for callables that are
# not functions or partials (bound methods, callable objects); functions and partials get
# a jit of their own, held weakly (:class:`_PerFunctionJit`).
_run_chunk_static = jax.jit(_run_chunk_impl, static_argnames=("step", *_CHUNK_STATIC))
# ``step`` traced: a ``jax.tree_util.Partial`` of arrays (:func:`is_traced_partial`); its
# function is in the tree structure (the cache key), its bound arrays are program inputs.
_run_chunk_traced = jax.jit(_run_chunk_impl, static_argnames=_CHUNK_STATIC)


class _PerFunctionJit:
    """One ``jax.jit`` per user function, alive only as long as that function.

    A static argument of a module-level jitted function stays in its compile cache for the
    life of the process, and with it the function, the arrays its closure holds and the
    compiled program with those arrays as constants: each ``fit`` called with a fresh
    closure (an ``eval_fn`` lambda over validation data, in a loop over seeds) kept ~ its
    captured arrays alive.  Here a plain function or ``functools.partial`` (identity-hashed,
    weakly referenceable) gets its own jit of ``make(fn_ref)``, which reads the function
    through a weak reference; the entry, its compiled programs and their constants go when
    the function is collected.  Other callables (bound methods: a new object per access;
    callable objects with value equality) return ``None``: callers fall back to the shared
    static-argument jit.
    """

    _KINDS = (types.FunctionType, functools.partial, jax.tree_util.Partial)

    def __init__(self, make):
        self._make = make
        self._by_id: dict[int, tuple[weakref.ref, Any]] = {}

    def get(self, fn):
        if type(fn) not in self._KINDS:
            return None
        entry = self._by_id.get(id(fn))
        if entry is not None and entry[0]() is fn:
            return entry[1]
        by_id, key = self._by_id, id(fn)

        def drop(ref):
            if by_id.get(key, (None,))[0] is ref:
                del by_id[key]

        try:
            ref = weakref.ref(fn, drop)
        except TypeError:  # pragma: no cover - not weakly referenceable
            return None
        jitted = self._make(ref)
        self._by_id[key] = (ref, jitted)
        return jitted

    def __len__(self) -> int:
        return len(self._by_id)


def _make_chunk_jit(step_ref):
    def run(state, t0, data, data_key, step_keys, prev_perm, prev_epoch, *, length,
            batch_size, steps_per_epoch, n, runs, data_runs_axis, batch_sharding,
            state_sharding, check_state=False):
        return _run_chunk_impl(state, t0, data, data_key, step_keys, prev_perm, prev_epoch,
                               step_ref(), length=length, batch_size=batch_size,
                               steps_per_epoch=steps_per_epoch, n=n, runs=runs,
                               data_runs_axis=data_runs_axis, batch_sharding=batch_sharding,
                               state_sharding=state_sharding, check_state=check_state)

    return jax.jit(run, static_argnames=_CHUNK_STATIC)


_chunk_jits = _PerFunctionJit(_make_chunk_jit)


def _chunk_program(step):
    """``(jitted, extra)``: the compiled chunk runner for ``step``, called as
    ``jitted(state, t0, data, data_key, step_keys, prev_perm, prev_epoch, *extra, **static)``."""
    if is_traced_partial(step):
        return _run_chunk_traced, (step,)
    own = _chunk_jits.get(step)
    if own is not None:
        return own, ()
    return _run_chunk_static, (step,)


def _run_chunk(state, t0, data, data_key, step_keys, prev_perm, prev_epoch, *, step, **static):
    run, extra = _chunk_program(step)
    return run(state, t0, data, data_key, step_keys, prev_perm, prev_epoch, *extra, **static)


def _chunk_shapes(state, t0, data, data_key, step_keys, prev_perm, prev_epoch, *, step,
                  **static):
    """:func:`_run_chunk`'s output shapes, traced, not run (``jit(...).trace``: the call of
    :func:`_run_chunk` with the same arguments afterwards reuses this trace)."""
    run, extra = _chunk_program(step)
    return run.trace(state, t0, data, data_key, step_keys, prev_perm, prev_epoch, *extra,
                     **static).out_info


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
def _run_eval_static(state, *, eval_fn, runs):
    return jax.vmap(eval_fn)(state) if runs else eval_fn(state)


@partial(jax.jit, static_argnames=("runs",))
def _run_eval_partial(state, eval_fn, *, runs):
    # eval_fn is a jax.tree_util.Partial: its function is part of the tree structure (the
    # compile cache key), its bound arguments are traced inputs, not constants
    return jax.vmap(eval_fn)(state) if runs else eval_fn(state)


def is_traced_partial(fn) -> bool:
    """``fn`` (a step or ``eval_fn``) is a ``jax.tree_util.Partial`` (exactly) whose bound
    arguments are all arrays: those are passed to the compiled program as inputs.  Any other
    callable (including a Partial binding Python values, which the function may need static)
    is a static argument, as before."""
    if type(fn) is not jax.tree_util.Partial:
        return False
    leaves = jax.tree_util.tree_leaves(fn)
    return all(isinstance(a, (jax.Array, np.ndarray, np.generic)) for a in leaves)


def _make_eval_jit(fn_ref):
    def run(state, *, runs):
        fn = fn_ref()
        return jax.vmap(fn)(state) if runs else fn(state)

    return jax.jit(run, static_argnames=("runs",))


_eval_jits = _PerFunctionJit(_make_eval_jit)


def _run_eval(state, *, eval_fn, runs):
    """``eval_fn(state)`` compiled (vmapped over runs with ``runs``).

    A plain callable is a static argument: each new closure compiles anew, and the arrays it
    closes over are embedded in the program as constants (a function or partial gets a jit
    of its own, freed with it: :class:`_PerFunctionJit`).  A ``jax.tree_util.Partial`` of
    arrays (:func:`is_traced_partial`) is a traced argument: one compiled program serves every
    call with the same function, argument shapes and state structure (e.g. validation data
    bound with ``Partial(fn, x_val, y_val)``).
    """
    if is_traced_partial(eval_fn):
        return _run_eval_partial(state, eval_fn, runs=runs)
    own = _eval_jits.get(eval_fn)  # a function or partial: its own jit, held weakly
    if own is not None:
        return own(state, runs=runs)
    return _run_eval_static(state, eval_fn=eval_fn, runs=runs)


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


def _ceil_to(t: int, k: int) -> int:
    return (t // k + 1) * k


def _largest_divisor_le(g: int, bound: int) -> int:
    best = 1
    for d in range(1, int(math.isqrt(g)) + 1):
        if g % d == 0:
            for c in (d, g // d):
                if best < c <= bound:
                    best = c
    return best


def default_chunking(total: int, intervals: Sequence[int]) -> tuple[int, bool]:
    """``(chunk, ragged)``: the default chunk length for ``total`` steps with chunk boundaries
    at every multiple of each of ``intervals`` (the eval and checkpoint periods).

    About a tenth of the run, dividing the intervals' gcd so every chunk has that length
    (one compiled program).  When the gcd is far below the smallest interval (co-prime
    periods, e.g. 100 and 2001: the gcd 1 made every chunk one step, one host round trip
    each), ``ragged`` is true: chunks of about a tenth of the run, at most the smallest
    interval and dividing it where that is close, are still cut at every multiple of each
    interval, and :class:`ChunkLauncher` splits each shorter remainder into powers of two,
    so at most ``1 + log2(chunk)`` lengths compile.
    """
    target = max(1, math.ceil(total / 10))
    if not intervals:
        return target, False
    g = 0
    for k in intervals:
        g = math.gcd(g, int(k))
    if g <= target:
        cur = g
    else:  # the largest divisor of g that is <= target keeps every chunk the same length
        best = _largest_divisor_le(g, target)
        cur = best if best * 4 >= target else g
    ideal = min(target, min(int(k) for k in intervals))
    if cur * 4 >= ideal:
        return cur, False
    m = min(int(k) for k in intervals)
    best = _largest_divisor_le(m, target)
    return (best if best * 4 >= ideal else ideal), True


def _default_chunk(total: int, intervals: Sequence[int]) -> int:
    """The chunk length of :func:`default_chunking`."""
    return default_chunking(total, intervals)[0]


# --------------------------------------------------------------------------- dispatch


class InFlight(NamedTuple):
    """One dispatched chunk: steps ``t_from .. t_to - 1`` from ``prev_state`` to ``state``
    (device arrays, not read back yet), its stacked ``metrics`` and its state-finiteness flag."""

    t_from: int
    t_to: int
    prev_state: Any
    state: Any
    metrics: dict[str, jax.Array]
    state_ok: jax.Array


@partial(jax.jit, static_argnames="R")
def _launch_keys(key, *, R):
    """``(data_key, step_keys)``: ``key`` split in two, the second into ``R`` run keys
    (``R = None``: kept whole); one program per ``R`` (eagerly each split and unpacking was
    one)."""
    data_key, step_key = jax.random.split(key)
    return data_key, (step_key if R is None else jax.random.split(step_key, R))


class ChunkLauncher:
    """Dispatches the chunks of one ``fit`` call in order (asynchronously: nothing is read back).

    Chunk boundaries fall on every multiple of ``chunk`` and of each of ``intervals`` (the
    eval and checkpoint periods) and on ``total``; with ``ragged`` (see
    :func:`default_chunking`) a piece between two boundaries shorter than ``chunk`` runs as
    chunks of decreasing powers of two.  Both depend only on the step a chunk starts at, so a
    resumed run dispatches the same chunks as an uninterrupted one.  The last drawn epoch
    permutation is carried from one chunk to the next, so each is drawn once per run.
    """

    def __init__(self, step, data, key, *, total, chunk, intervals, batch_size, steps_per_epoch,
                 n, runs, data_runs_axis, batch_sharding, state_sharding, check_state, R=None,
                 ragged=False):
        data_key, self._step_keys = _launch_keys(key, R=R if runs else None)
        self._data, self._data_key = data, data_key
        self._period = [chunk, *intervals]
        self._chunk, self._ragged = chunk, ragged
        self.total = total
        self._static = dict(step=step, batch_size=batch_size, steps_per_epoch=steps_per_epoch,
                            n=n, runs=runs, data_runs_axis=data_runs_axis,
                            batch_sharding=batch_sharding, state_sharding=state_sharding,
                            check_state=check_state)
        # last drawn permutation and its epoch, from host (no eager program per shape)
        self._perm = [as_device_array(np.zeros((1 if batch_size is None else n,), np.int32)),
                      as_device_array(np.asarray(-1, np.int32))]

    def _end(self, t_from: int) -> int:
        t_to = min([_ceil_to(t_from, k) for k in self._period] + [self.total])
        if self._ragged and t_to - t_from < self._chunk:
            t_to = t_from + (1 << ((t_to - t_from).bit_length() - 1))  # a power of two
        return t_to

    def metric_shapes(self, t_from: int, state) -> tuple[Any, int]:
        """``(metrics, L)``: the metrics (``ShapeDtypeStruct`` leaves ``[L]`` or ``[L, R]``)
        of the chunk that :meth:`launch` would dispatch at ``t_from`` and its length ``L``;
        the step traced, not run, so a bad metric is an error before training (that launch
        reuses the trace)."""
        t_to = self._end(t_from)
        with _step_errors():
            out = _chunk_shapes(state, np.asarray(t_from, np.int32), self._data,
                                self._data_key, self._step_keys, *self._perm,
                                length=t_to - t_from, **self._static)
        return out[1], t_to - t_from

    def launch(self, t_from: int, state) -> InFlight | None:
        """Dispatch the chunk starting at ``t_from`` (``None`` once ``t_from`` reaches the end)."""
        if t_from >= self.total:
            return None
        t_to = self._end(t_from)
        with _step_errors():
            new, metrics, self._perm[0], self._perm[1], ok = _run_chunk(
                state, np.asarray(t_from, np.int32), self._data, self._data_key,
                self._step_keys, *self._perm, length=t_to - t_from, **self._static)
        return InFlight(t_from, t_to, state, new, metrics, ok)


@contextlib.contextmanager
def _step_errors():
    """A scan's carry mismatch (the step changed the state's structure, shape or dtype) as a
    ``TypeError`` that says what ``step`` must return."""
    try:
        yield
    except TypeError as e:
        if "carry" in str(e) or "scan" in str(e):
            raise TypeError(
                "fit: step(state, batch, key) must return (new_state, metrics) with "
                "new_state of the same pytree structure, shapes and dtypes as state. "
                f"JAX said: {e}"
            ) from e
        raise
