"""Argument checks of :func:`layerlab.loop.fit`: everything is validated before compiling."""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from layerlab._checks import check_int, check_number
from layerlab.loop._checkpoint import Checkpointing, checkpoint_path
from layerlab.loop._early_stopping import EarlyStopping
from layerlab.loop._placement import Placement

__all__ = ["DEFAULT_DATA_AXIS", "DEFAULT_MAX_TO_KEEP", "FitPlan", "check_fit_args",
           "grouped_checkpoint", "grouped_placement"]


class FitPlan(NamedTuple):
    """What the checks derive: the key, the sample axis and count, runs, steps per epoch, total."""

    key: jax.Array
    axis: int          # sample axis of the data leaves (1 with data_runs_axis)
    n: int             # number of samples
    R: int | None      # number of runs (runs=True), else None
    batch_size: int | None
    spe: int           # steps per epoch
    total: int         # number of steps T


class _DefaultInt(int):
    """``fit``'s default of a flat argument that has a grouped form: an ``int`` equal to the
    default whose identity tells "not given" from an explicit value equal to it (copies and
    pickles return the same object)."""

    __slots__ = ()

    def __reduce__(self):
        return "DEFAULT_MAX_TO_KEEP"

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self


class _DefaultStr(str):
    """As :class:`_DefaultInt`, for a string default."""

    __slots__ = ()

    def __reduce__(self):
        return "DEFAULT_DATA_AXIS"

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self


DEFAULT_MAX_TO_KEEP = _DefaultInt(2)
DEFAULT_DATA_AXIS = _DefaultStr("data")


def grouped_checkpoint(checkpoint, checkpoint_dir, checkpoint_every,
                       max_to_keep) -> Checkpointing:
    """``fit``'s checkpoint arguments as one :class:`Checkpointing` (``directory`` ``None``:
    no checkpoints), from ``checkpoint=`` or the flat ``checkpoint_dir=/_every=/max_to_keep=``."""
    if checkpoint is None:
        if isinstance(max_to_keep, _DefaultInt):  # not given: only used with a directory
            keep = int(max_to_keep) if checkpoint_dir is not None else None
        else:  # given: check_fit_args refuses it without checkpoint_dir
            keep = max_to_keep
        return Checkpointing(checkpoint_dir, checkpoint_every, keep)
    if checkpoint_dir is not None or checkpoint_every is not None \
            or max_to_keep is not DEFAULT_MAX_TO_KEEP:
        raise ValueError("fit: give checkpoint= or checkpoint_dir=/checkpoint_every=/"
                         "max_to_keep=, not both (the flat ones would be ignored).")
    if not isinstance(checkpoint, Checkpointing):
        raise TypeError("fit: checkpoint must be a loop.Checkpointing, got "
                        f"{type(checkpoint).__name__}.")
    if checkpoint.directory is None:
        raise ValueError("fit: checkpoint.directory must be a directory path, got None; leave "
                         "checkpoint= out to train without checkpoints.")
    m = checkpoint.min_interval_s
    try:
        ok = m is None or (not isinstance(m, bool)
                           and isinstance(m, (int, float, np.integer, np.floating))
                           and math.isfinite(float(m)) and float(m) >= 0)
    except OverflowError:  # an int too large for a float
        ok = False
    if not ok:
        raise ValueError("fit: checkpoint.min_interval_s must be None or a finite number of "
                         f"seconds >= 0, got {m!r}.")
    return checkpoint


def grouped_placement(placement, mesh, data_axis, state_sharding, data_sharding) -> Placement:
    """``fit``'s placement arguments as one :class:`Placement`, from ``placement=`` or the flat
    ``mesh=/data_axis=/state_sharding=/data_sharding=``."""
    if placement is None:
        axis = str(data_axis) if isinstance(data_axis, _DefaultStr) else data_axis
        return Placement(mesh, axis, state_sharding, data_sharding)
    if mesh is not None or state_sharding is not None or data_sharding is not None \
            or data_axis is not DEFAULT_DATA_AXIS:
        raise ValueError("fit: give placement= or mesh=/data_axis=/state_sharding=/"
                         "data_sharding=, not both (the flat ones would be ignored).")
    if not isinstance(placement, Placement):
        raise TypeError("fit: placement must be a loop.Placement, got "
                        f"{type(placement).__name__}.")
    return placement


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


def _check_hashable(fn, name: str) -> None:
    """``fn`` (``step`` / ``eval_fn``) can be a static argument of ``jax.jit``: hashable."""
    if fn is None:
        return
    try:
        hash(fn)
    except TypeError as e:
        raise TypeError(
            f"fit: {name} must be hashable (the compiled program is cached on it), got a "
            f"{type(fn).__name__} that is not ({e}); a dataclass with eq=True and not frozen "
            "has no hash, and a frozen one with array fields cannot hash them.  Pass a "
            "function or a functools.partial of one (settings bound as Python values), or a "
            "jax.tree_util.Partial (arrays bound as inputs of the program): e.g. "
            f"functools.partial(type(obj).__call__, obj) for {name}=obj, or declare the class "
            "with @dataclasses.dataclass(eq=False)."
        ) from None


def check_fit_args(step, state, data, *, key, steps, epochs, batch_size, eval_fn, eval_every,
                   chunk_size, checkpoint_dir, checkpoint_every, max_to_keep, early_stopping,
                   check_finite, runs, data_runs_axis, callback,
                   eval_at_start=False) -> FitPlan:
    """Validate ``fit``'s arguments (messages name the argument, the expectation and the value).

    Raises:
      TypeError / ValueError: on the first bad argument.
    """
    if not callable(step):
        raise TypeError(
            "fit: step must be callable step(state, batch, key) -> (state, metrics); "
            "for an optax optimizer use layerlab.loop.optax_step(loss_fn, opt).step."
        )
    key = _as_key(key)
    if data_runs_axis and not runs:
        raise ValueError("fit: data_runs_axis=True needs runs=True.")
    with_paths = jax.tree_util.tree_flatten_with_path(data)[0]
    if not with_paths:
        raise ValueError("fit: data is empty; pass a pytree of arrays such as (x, y).")
    axis = 1 if data_runs_axis else 0
    shapes = [np.shape(a) for _, a in with_paths]
    names = [f"data{jax.tree_util.keystr(p)}" for p, _ in with_paths]
    short = [f"{nm} {s}" for nm, s in zip(names, shapes, strict=True) if len(s) <= axis]
    if short:
        raise ValueError(f"fit: every data array needs a sample axis {axis}; {short[0]} has "
                         f"none (shapes {shapes}).")
    n = shapes[0][axis]
    if any(s[axis] != n for s in shapes):
        odd = [f"{nm} {s}" for nm, s in zip(names, shapes, strict=True) if s[axis] != n]
        raise ValueError(
            f"fit: data arrays disagree on the number of samples (axis {axis}): {names[0]} "
            f"has {n} ({shapes[0]}), {', '.join(odd[:3])}; shapes {shapes}."
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
    for name, fn in (("step", step), ("eval_fn", eval_fn)):
        _check_hashable(fn, name)
    if callback is not None and not callable(callback):
        raise TypeError(f"fit: callback must be callable, got {type(callback).__name__}.")
    if eval_every is not None and eval_fn is None:
        raise ValueError("fit: eval_every given without eval_fn.")
    if eval_at_start and eval_fn is None:
        raise ValueError("fit: eval_at_start=True given without eval_fn (nothing to evaluate).")
    if early_stopping is not None:
        if not isinstance(early_stopping, EarlyStopping):
            hint = (f"; for a metric name: EarlyStopping({early_stopping!r})"
                    if isinstance(early_stopping, str) else "")
            raise TypeError(f"fit: early_stopping must be a loop.EarlyStopping(metric, ...), "
                            f"got {early_stopping!r}{hint}.")
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
    if checkpoint_dir is not None:
        checkpoint_path(checkpoint_dir)  # its type, not empty (before anything runs)
    if max_to_keep is not None and checkpoint_dir is None:
        raise ValueError(f"fit: max_to_keep={max_to_keep} given without checkpoint_dir (it is "
                         "the number of checkpoints kept there); pass checkpoint_dir= too, or "
                         "leave max_to_keep out (or None).")
    return FitPlan(key, axis, int(n), R, batch_size, spe, total)
