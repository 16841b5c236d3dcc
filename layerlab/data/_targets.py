"""One convention for classification targets at the training entry points.

Every training entry point that needs class labels accepts integer labels ``[N]`` (as
:func:`layerlab.data.load` returns them) or one-hot rows ``[N, C]``; those whose maths
needs target vectors (MSE on one-hot targets: DGL, LEGO, the bottleneck's ``mse_cost``)
turn integer labels into plain one-hot rows with :func:`as_targets`; those that need labels
(density matrices, accuracy) turn one-hot rows into labels with :func:`as_labels`. Value
checks (labels in ``[0, C)``) run on concrete arrays only, so both stay traceable under
``jit``; shapes and dtypes are checked always.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike, DTypeLike

__all__ = ["as_labels", "as_targets", "is_labels"]


def _concrete(a) -> bool:
    return not isinstance(a, jax.core.Tracer)


def is_labels(y) -> bool:
    """``True`` for integer labels ``[N]``."""
    return np.ndim(y) == 1 and jnp.issubdtype(jnp.result_type(y), jnp.integer)


def _check_type(y, name: str, fn: str, rows: str = "targets") -> None:
    if y is None or isinstance(y, (str, bytes)):
        raise TypeError(f"{fn}: {name} must be an array of integer labels [N] or {rows} "
                        f"[N, C], got {type(y).__name__}.")


def _check_range(y, num_classes: int, name: str, fn: str) -> None:
    if _concrete(y) and np.size(y):
        yn = np.asarray(y)
        lo, hi = int(yn.min()), int(yn.max())
        if lo < 0 or hi >= num_classes:
            raise ValueError(f"{fn}: {name} must be integer labels in [0, {num_classes}), "
                             f"got values in [{lo}, {hi}].")


def as_targets(y: ArrayLike, num_classes: int, *, name: str = "y", n: int | None = None,
               dtype: DTypeLike | None = None, fn: str = "as_targets") -> jax.Array:
    """Targets ``[N, C]``: one-hot rows of integer labels ``[N]``, or ``y`` itself when it is
    already ``[N, C]`` (one-hot, zero-mean one-hot or any real targets).

    Args:
      y: ``[N]`` integer labels in ``[0, C)`` or ``[N, C]`` float targets.
      num_classes: ``C`` (e.g. the network's output width).
      name: argument name for error messages.
      n: expected ``N`` (checked when given).
      dtype: float dtype of the one-hot rows (default float32, or ``y``'s float dtype).
      fn: the public function's name, the prefix of every error message (a training entry
        point passes its own: ``"lego: y must ..."``).

    Raises:
      ValueError: wrong rank/shape, labels out of range.  TypeError: float ``[N]``, ``None``
        or a string.
    """
    _check_type(y, name, fn)
    if not hasattr(y, "shape"):
        y = np.asarray(y)
    if n is not None and (np.ndim(y) == 0 or y.shape[0] != n):
        raise ValueError(f"{fn}: {name} must have {n} rows (one per sample), got shape "
                         f"{tuple(np.shape(y))}.")
    if np.ndim(y) == 1:
        if not jnp.issubdtype(jnp.result_type(y), jnp.integer):
            raise TypeError(f"{fn}: {name} of shape [N] must hold integer class labels, got "
                            f"dtype {jnp.result_type(y)}; pass [N, {num_classes}] float "
                            "targets for regression.")
        _check_range(y, num_classes, name, fn)
        return jax.nn.one_hot(y, num_classes, dtype=dtype or jnp.float32)
    if np.ndim(y) == 2:
        if y.shape[1] != num_classes:
            raise ValueError(f"{fn}: {name} as targets [N, C] must have C = {num_classes} "
                             f"columns (the output width), got shape {tuple(y.shape)}.")
        return jnp.asarray(y) if dtype is None else jnp.asarray(y, dtype)
    raise ValueError(f"{fn}: {name} must be integer labels [N] or targets [N, {num_classes}], "
                     f"got shape {tuple(np.shape(y))}.")


def as_labels(y: ArrayLike, num_classes: int | None = None, *, name: str = "labels",
              n: int | None = None, fn: str = "as_labels") -> np.ndarray | jax.Array:
    """Integer labels ``[N]``: ``y`` itself, or ``argmax`` of one-hot rows ``[N, C]``.

    Host (numpy) input stays numpy. Raises ``ValueError`` for other shapes, labels out of
    ``[0, num_classes)`` or a row count other than ``n``; every message starts with ``fn``
    (the public function called) and names the argument ``name``.
    """
    _check_type(y, name, fn, rows="one-hot rows")
    if not hasattr(y, "shape"):
        y = np.asarray(y)
    if np.ndim(y) == 1 and not jnp.issubdtype(jnp.result_type(y), jnp.integer):
        raise TypeError(f"{fn}: {name} of shape [N] must hold integer labels, got dtype "
                        f"{jnp.result_type(y)}.")
    if np.ndim(y) == 2:
        if num_classes is not None and y.shape[1] != num_classes:
            raise ValueError(f"{fn}: {name} as one-hot rows [N, C] must have C = "
                             f"{num_classes} columns, got shape {tuple(y.shape)}.")
        y = (np.argmax(y, axis=1) if isinstance(y, np.ndarray) else jnp.argmax(y, axis=1))
    elif np.ndim(y) != 1 or not jnp.issubdtype(jnp.result_type(y), jnp.integer):
        raise ValueError(f"{fn}: {name} must be integer labels [N] or one-hot rows [N, C], got "
                         f"{jnp.result_type(y)} of shape {tuple(np.shape(y))}.")
    if n is not None and y.shape[0] != n:
        raise ValueError(f"{fn}: {name} must have {n} labels (one per sample), got "
                         f"{y.shape[0]}.")
    if num_classes is not None:
        _check_range(y, num_classes, name, fn)
    return y
