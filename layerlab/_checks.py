"""Argument checks shared by every public function of layerlab (private module).

One set of checkers so that every package reports bad input the same way: the message names
the function, the argument, what was expected and what came, e.g.::

    relu_nngp: x1 must be a [n1, d] array (rank 2; flatten images first), got shape (3,).
    class_density_matrices: y must hold integer labels in [0, 3), got values in [0, 4].

What runs where
---------------
*Static* checks (Python type, rank, shape, dtype, lengths, Python hyper-parameters) only read
an array's ``shape``/``dtype`` and run under ``jax.jit`` as well: they raise at trace time.

*Value* checks (finiteness, label ranges, the sign of a hyper-parameter passed as an array,
finiteness of a result) need concrete numbers.  They run only *eagerly*: on a
``jax.core.Tracer`` (inside ``jit``/``vmap``/``grad``/``scan``) they are skipped, so the same
function stays traceable and a traced caller gets NaN instead of an exception (the loop's
:func:`layerlab.loop.fit` then reports the non-finite metric or state).  Every value check
says "eager only" in its docstring.

Errors: ``TypeError`` for a wrong kind of object (``None``, a string, a float where an
integer is needed), ``ValueError`` for a wrong shape or value, and
:class:`NonFiniteResultError` (a ``ValueError`` and a ``FloatingPointError``) for a
computed result that is NaN/Inf.
"""
from __future__ import annotations

import functools
import numbers
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "NonFiniteResultError",
    "is_traced",
    "is_concrete",
    "as_device_array",
    "check_array",
    "check_finite",
    "check_labels",
    "check_int",
    "check_number",
    "nonnegative_or_nan",
    "check_choice",
    "check_same_length",
    "check_result_finite",
    "check_key",
    "check_float_dtype",
    "promote_float",
]


class NonFiniteResultError(ValueError, FloatingPointError):
    """A computed result is NaN/Inf: reported as an error, never returned (eager calls)."""


# --------------------------------------------------------------------------- tracing


def is_traced(*xs: Any) -> bool:
    """True if any leaf of ``xs`` is a ``jax.core.Tracer`` (we are inside jit/vmap/grad)."""
    for x in xs:
        for leaf in jax.tree_util.tree_leaves(x):
            if isinstance(leaf, jax.core.Tracer):
                return True
    return False


def is_concrete(*xs: Any) -> bool:
    """True if no leaf of ``xs`` is traced (or a multi-process array this process cannot
    read whole): value checks can run on them."""
    for x in xs:
        for leaf in jax.tree_util.tree_leaves(x):
            if isinstance(leaf, jax.core.Tracer):
                return False
            if isinstance(leaf, jax.Array) and not leaf.is_fully_addressable:
                return False
    return True


def _where(fn: str | None) -> str:
    return f"{fn}: " if fn else ""


def _describe(x: Any) -> str:
    if x is None:
        return "None"
    if isinstance(x, str):
        return f"a string {x[:40]!r}"
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return f"{type(x).__name__} of shape {tuple(x.shape)} and dtype {x.dtype}"
    return f"{type(x).__name__} {str(x)[:60]}"


_KINDS = {
    "float": ("floating-point", lambda dt: jnp.issubdtype(dt, jnp.floating)),
    "int": ("integer", lambda dt: jnp.issubdtype(dt, jnp.integer)),
    "numeric": ("numeric", lambda dt: jnp.issubdtype(dt, jnp.number) or dt == jnp.bool_),
    "real": ("real (integer or floating)", lambda dt: jnp.issubdtype(dt, jnp.integer)
             or jnp.issubdtype(dt, jnp.floating) or dt == jnp.bool_),
    # numbers proper: a bool array (``x > 0``, ``w_var=True``) is a mask, not a quantity
    "real_number": ("numeric (integer or floating, not bool)",
                    lambda dt: jnp.issubdtype(dt, jnp.integer)
                    or jnp.issubdtype(dt, jnp.floating)),
}


# --------------------------------------------------------------------------- arrays


def as_device_array(x: Any) -> jax.Array:
    """``jnp.asarray(x)`` without a compiled program for a numpy array: ``jax.device_put`` (the
    same dtype, weak type and placement; JAX >= 0.10 lifts a numpy array into ``jnp.asarray`` by
    an identity program, compiled once per shape and dtype).  Anything else goes through
    ``jnp.asarray``."""
    if type(x) is np.ndarray and x.dtype.kind in "biufc":
        return jax.device_put(x)
    return jnp.asarray(x)


def jit_or_eager(jitted: Any, *args: Any, **static: Any) -> Any:
    """``jitted(*args, **static)`` -- a ``jax.jit`` function whose keyword arguments are its
    static ones -- or, when a static value cannot be hashed (an array, an unhashable
    callable), its undecorated function run op by op, as before it was jitted.  Concrete 0-d
    *floating* arrays among ``static`` are first made Python floats (hashable; one program
    per value); other arrays (integer ones included) take the op-by-op route.
    """
    static = {k: float(v) if (isinstance(v, (np.ndarray, np.generic, jax.Array))
                              and np.ndim(v) == 0 and is_concrete(v)
                              and jnp.issubdtype(jnp.result_type(v), jnp.floating)) else v
              for k, v in static.items()}
    try:
        hash(tuple(static.values()))
    except TypeError:
        return jitted.__wrapped__(*args, **static)
    return jitted(*args, **static)


def check_array(
    x: Any,
    name: str,
    *,
    fn: str | None = None,
    ndim: int | Sequence[int] | None = None,
    shape: Sequence[int | None] | None = None,
    kind: str | None = "real",
    dtypes: Sequence[Any] | None = None,
    min_size: int | None = None,
    min_rows: int | None = None,
    finite: bool = False,
    allow_none: bool = False,
    xp: str = "jnp",
):
    """Convert ``x`` to an array after checking what it is; return it.

    Static (also under ``jit``): ``x`` is array-like (not ``None``, not a string, not a dict),
    its rank is ``ndim`` (an int or a tuple of allowed ranks), its shape matches ``shape``
    (``None`` entries match anything), its dtype is of ``kind`` (``"float"``, ``"int"``,
    ``"numeric"``, ``"real"`` (both with bool), ``"real_number"`` (integer or floating, no
    bool) or ``None`` for any) or among ``dtypes``, it has at least
    ``min_size`` entries and ``min_rows`` rows (leading axis).

    Eager only: with ``finite=True``, no NaN/Inf entries (skipped on tracers).

    Args:
      x: the value passed by the user.
      name: the argument's name, used in the message.
      fn: the public function's name, used as the message prefix.
      xp: ``"jnp"`` returns a ``jax.Array`` (tracers pass through), ``"np"`` a numpy array.

    Returns:
      the array (``None`` when ``allow_none`` and ``x is None``).
    """
    where = _where(fn)
    if x is None:
        if allow_none:
            return None
        raise TypeError(f"{where}{name} must be an array, got None.")
    if isinstance(x, (str, bytes, dict)) or callable(x) and not hasattr(x, "shape"):
        raise TypeError(f"{where}{name} must be an array, got {_describe(x)}.")
    if isinstance(x, jax.core.Tracer) or isinstance(x, jax.Array):
        arr = x
    else:
        try:
            arr = (np.asarray(x) if xp == "np" else as_device_array(x))
        except (TypeError, ValueError) as e:
            raise TypeError(f"{where}{name} must be an array, got {_describe(x)} ({e}).") from e
        if arr.dtype == object:
            raise TypeError(f"{where}{name} must be a numeric array, got {_describe(x)}.")
    if xp == "np" and not isinstance(arr, (np.ndarray, jax.core.Tracer)):
        arr = np.asarray(arr)
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
        if arr.ndim not in allowed:
            want = " or ".join(str(a) for a in allowed)
            raise ValueError(
                f"{where}{name} must have rank {want}"
                + (f" (shape {_fmt_shape(shape)})" if shape is not None else "")
                + f", got shape {tuple(arr.shape)}."
            )
    if shape is not None:
        if len(shape) != arr.ndim or any(
            s is not None and s != a for s, a in zip(shape, arr.shape, strict=False)
        ):
            raise ValueError(
                f"{where}{name} must have shape {_fmt_shape(shape)}, got {tuple(arr.shape)}."
            )
    if dtypes is not None:
        ok = [jnp.dtype(d) for d in dtypes]
        if jnp.dtype(arr.dtype) not in ok:
            raise TypeError(
                f"{where}{name} must have dtype {' or '.join(str(d) for d in ok)}, "
                f"got {arr.dtype}."
            )
    elif kind is not None:
        label, test = _KINDS[kind]
        if not test(arr.dtype):
            raise TypeError(f"{where}{name} must hold {label} values, got dtype {arr.dtype}.")
    if min_size is not None and arr.size < min_size:
        raise ValueError(
            f"{where}{name} must have at least {min_size} entries, got shape {tuple(arr.shape)}."
        )
    if min_rows is not None and (arr.ndim == 0 or arr.shape[0] < min_rows):
        raise ValueError(
            f"{where}{name} must have at least {min_rows} rows (samples), got shape "
            f"{tuple(arr.shape)}."
        )
    if finite:
        check_finite(arr, name, fn=fn)
    return arr


def _fmt_shape(shape) -> str:
    return "[" + ", ".join("?" if s is None else str(s) for s in shape) + "]"


def check_finite(x: Any, name: str, *, fn: str | None = None, hint: str = "") -> None:
    """Raise ``ValueError`` if a concrete array (or pytree) has NaN/Inf entries.

    Eager only: a no-op on tracers.  Non-float arrays are always finite.
    """
    if not is_concrete(x):
        return
    for leaf in jax.tree_util.tree_leaves(x):
        arr = np.asarray(leaf)
        if not jnp.issubdtype(arr.dtype, jnp.inexact):  # (bfloat16 is no numpy inexact)
            continue
        ok = np.isfinite(arr)
        if not ok.all():
            bad = int(arr.size - np.count_nonzero(ok))
            raise ValueError(
                f"{_where(fn)}{name} has {bad} non-finite (NaN/Inf) entries out of {arr.size}; "
                + (hint or "clean or impute the data first.")
            )


def check_labels(
    y: Any,
    num_classes: int | None,
    name: str = "y",
    *,
    fn: str | None = None,
    n: int | None = None,
    xp: str = "jnp",
):
    """Integer class labels ``[n]`` with values in ``[0, num_classes)``; returns the array.

    Static: rank 1, integer dtype (floats holding whole numbers are refused: cast them),
    length ``n`` when given.  Eager only: the range ``[0, num_classes)`` (skipped on tracers).
    """
    y = check_array(y, name, fn=fn, ndim=1, kind="int", xp=xp)
    if n is not None and y.shape[0] != n:
        raise ValueError(
            f"{_where(fn)}{name} must have {n} labels (one per sample), got shape "
            f"{tuple(y.shape)}."
        )
    if num_classes is not None:
        if is_concrete(num_classes):
            check_int(num_classes, "num_classes", fn=fn, min_value=1)
        if is_concrete(y, num_classes) and y.size:
            arr = np.asarray(y)
            lo, hi = int(arr.min()), int(arr.max())
            c = int(num_classes)
            if lo < 0 or hi >= c:
                raise ValueError(
                    f"{_where(fn)}{name} must be integer class labels in [0, {c}) "
                    f"(num_classes={c}), got values in [{lo}, {hi}]."
                )
    return y


def promote_float(*xs: Any) -> list[jax.Array]:
    """The arrays in one float dtype: JAX's promotion of theirs with a Python float, and at
    least float32.  Half precision is computed in float32, float32 and float64 stay as they
    are, and integer or bool arrays alone go to JAX's default float ``jnp.result_type(float)``
    (float32, float64 under ``jax_enable_x64``; as ``int_array * 1.0`` would, where this
    function once gave float32 under x64 too); beside a float array they take its dtype.
    Integer arguments must never truncate real ones nor overflow in products (uint8 pixels,
    int32 features)."""
    arrs = [as_device_array(x) for x in xs]
    # a weak `float` makes integers default floats but leaves floats (half precision too) alone
    dt = jnp.promote_types(jnp.result_type(*(a.dtype for a in arrs), float), jnp.float32)
    return [a.astype(dt) for a in arrs]


def check_key(key: Any, name: str = "key", *, fn: str | None = None,
              allow_none: bool = False):
    """A single PRNG key: a typed key of shape ``()`` (``jax.random.key``) or raw key data,
    a ``uint32`` vector (the legacy ``jax.random.PRNGKey``).  Returns ``key`` unchanged
    (``None`` when ``allow_none``: an optional key).

    Static (also under ``jit``): reads only the dtype and shape.  An integer seed is refused
    with a ``TypeError`` saying to wrap it in ``jax.random.key``; raw key data whose length is
    not the default PRNG implementation's key size (2 words for threefry2x32) with a
    ``ValueError`` (``jax.random`` would read or reject it later, far from the call).
    """
    where = _where(fn)
    if key is None and allow_none:
        return None
    dt = getattr(key, "dtype", None)
    if dt is None or not hasattr(key, "shape"):
        raise TypeError(f"{where}{name} must be a PRNG key (jax.random.key(seed)), got "
                        f"{_describe(key)}.")
    if jnp.issubdtype(dt, jax.dtypes.prng_key):
        if key.shape != ():
            raise ValueError(f"{where}{name} must be a single PRNG key, got a key array of "
                             f"shape {tuple(key.shape)}.")
        return key
    if jnp.dtype(dt) == jnp.uint32 and key.ndim == 1:
        size = _raw_key_size(str(jax.config.jax_default_prng_impl))
        if key.shape[0] != size:
            raise ValueError(f"{where}{name} is raw key data of shape {tuple(key.shape)}, but "
                             f"the PRNG implementation "
                             f"{jax.config.jax_default_prng_impl!r} uses {size} uint32 "
                             f"words; make the key with jax.random.key(seed).")
        return key
    raise TypeError(f"{where}{name} must be a PRNG key (jax.random.key(seed)), got "
                    f"{_describe(key)}.")


@functools.cache
def _raw_key_size(impl: str) -> int:
    """Length of the raw ``uint32`` key data of the PRNG implementation ``impl`` (the default
    one's name, the cache key): 2 for threefry2x32, 4 for rbg.  Traced, not run."""
    return int(jax.eval_shape(lambda: jax.random.key_data(jax.random.key(0))).shape[-1])


def check_float_dtype(dtype: Any, name: str = "dtype", *, fn: str | None = None):
    """A floating-point dtype (float16/bfloat16/float32/float64) for parameters or running
    sums; returns it as a ``numpy.dtype``.

    Static.  A dtype is a ``numpy.dtype``, a scalar type (``jnp.float32``, ``np.float64``,
    ``float``) or its name (``"float32"``); an array or a number in its place is refused with
    a ``TypeError`` (``jnp.dtype(x)`` would read its dtype).  An integer, bool or complex
    dtype is refused with a ``TypeError`` too: random draws cannot be made in it (JAX's own
    error names neither the function nor the argument) and sums kept in it would truncate
    every real value added to them.
    """
    where = _where(fn)
    if dtype is not None and not isinstance(dtype, (str, np.dtype, type)):
        # an array or a number: jnp.dtype(x) would read an array's dtype (deprecated)
        hint = (f" of shape {tuple(np.shape(dtype))}; pass its .dtype if that was meant"
                if hasattr(dtype, "shape") and hasattr(dtype, "dtype") else "")
        raise TypeError(f"{where}{name} must be a floating-point dtype (e.g. jnp.float32), "
                        f"got a value of type {type(dtype).__name__}{hint}.")
    try:
        if dtype is None:  # numpy reads None as float64
            raise TypeError("None")
        dt = jnp.dtype(dtype)
    except TypeError as e:
        raise TypeError(f"{where}{name} must be a floating-point dtype (e.g. jnp.float32), "
                        f"got {dtype!r}.") from e
    if not jnp.issubdtype(dt, jnp.floating):
        raise TypeError(f"{where}{name} must be a floating-point dtype (e.g. jnp.float32), "
                        f"got {dt}.")
    return dt


# --------------------------------------------------------------------------- scalars


def check_int(
    v: Any,
    name: str,
    *,
    fn: str | None = None,
    min_value: int | None = None,
    max_value: int | None = None,
    allow_none: bool = False,
) -> int | None:
    """A Python/numpy integer (not ``bool``, not ``2.7``; ``2.0`` refused too) in range.

    Static: runs on Python values; returns ``int(v)``.
    """
    where = _where(fn)
    if v is None:
        if allow_none:
            return None
        raise TypeError(f"{where}{name} must be an integer, got None.")
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (numbers.Integral, np.integer)):
        if hasattr(v, "shape") and getattr(v, "shape", None) == () and not is_traced(v) \
                and jnp.issubdtype(v.dtype, jnp.integer):
            v = int(v)
        else:
            raise TypeError(f"{where}{name} must be an integer, got {_describe(v)}.")
    v = int(v)
    if min_value is not None and v < min_value:
        raise ValueError(f"{where}{name} must be >= {min_value}, got {v}.")
    if max_value is not None and v > max_value:
        raise ValueError(f"{where}{name} must be <= {max_value}, got {v}.")
    return v


def check_scalar(v, name: str, fn: str, what: str = "") -> None:
    """``v`` is a scalar (static: its shape only; a traced scalar under ``vmap`` passes).
    ``what`` says in the message why (e.g. one value shared by every layer)."""
    if np.ndim(v) != 0:   # (np: a Python list too; a tracer has .ndim)
        extra = f" ({what})" if what else ""
        raise ValueError(f"{fn}: {name} must be a scalar{extra}, got shape "
                         f"{tuple(np.shape(v))}; vmap over the values to evaluate several.")


def check_number(
    v: Any,
    name: str,
    *,
    fn: str | None = None,
    min_value: float | None = None,
    max_value: float | None = None,
    lo_open: bool = False,
    hi_open: bool = False,
    allow_none: bool = False,
    what: str = "",
):
    """A real scalar hyper-parameter, finite and in ``[min_value, max_value]``.

    ``lo_open``/``hi_open`` exclude the bound (``min_value=0, lo_open=True`` means ``> 0``).
    Python numbers and 0-d arrays are checked (eagerly); a traced scalar passes through
    unchecked (eager only).  Returns ``v`` unchanged.
    """
    where = _where(fn)
    if v is None:
        if allow_none:
            return None
        raise TypeError(f"{where}{name} must be a number, got None.")
    if isinstance(v, (str, bytes)) or isinstance(v, (bool, np.bool_)):
        raise TypeError(f"{where}{name} must be a number, got {_describe(v)}.")
    if not is_concrete(v):
        return v
    try:
        arr = np.asarray(v)
    except Exception as e:  # pragma: no cover - exotic objects
        raise TypeError(f"{where}{name} must be a number, got {_describe(v)}.") from e
    if arr.dtype == object or not jnp.issubdtype(arr.dtype, jnp.number):  # bfloat16 too
        raise TypeError(f"{where}{name} must be a number, got {_describe(v)}.")
    if np.iscomplexobj(arr):
        raise TypeError(f"{where}{name} must be a real number, got {_describe(v)}.")
    vals = arr.astype(np.float64).ravel()
    shown = vals.tolist() if vals.size > 1 else float(vals[0]) if vals.size else vals.tolist()
    extra = f" ({what})" if what else ""
    if not np.all(np.isfinite(vals)):
        raise ValueError(f"{where}{name} must be finite{extra}, got {shown}.")
    if min_value is not None and (np.any(vals <= min_value) if lo_open
                                  else np.any(vals < min_value)):
        rel = ">" if lo_open else ">="
        raise ValueError(f"{where}{name} must be {rel} {min_value}{extra}, got {shown}.")
    if max_value is not None and (np.any(vals >= max_value) if hi_open
                                  else np.any(vals > max_value)):
        rel = "<" if hi_open else "<="
        raise ValueError(f"{where}{name} must be {rel} {max_value}{extra}, got {shown}.")
    return v


def nonnegative_or_nan(v: Any, *, positive: bool = False):
    """The traced half of a sign check on a hyper-parameter: ``v`` unchanged when concrete
    (check it eagerly with :func:`check_number`), else ``where(v >= 0 & finite, v, NaN)``
    (``v > 0`` with ``positive``), so that a traced invalid value gives NaN, not a finite
    wrong result (the kernels' ``w_var``/``b_var`` policy).  Values and gradients of valid
    values are unchanged."""
    if is_concrete(v):
        return v
    v = jnp.asarray(v)
    ok = (v > 0 if positive else v >= 0) & jnp.isfinite(v)
    return jnp.where(ok, v, jnp.nan)  # (a weakly typed v stays weakly typed)


def check_choice(v: Any, name: str, choices: Sequence[Any], *, fn: str | None = None):
    """``v`` is one of ``choices`` (static)."""
    if v not in tuple(choices):
        raise ValueError(
            f"{_where(fn)}{name} must be one of {list(choices)!r}, got {v!r}."
        )
    return v


def check_same_length(*named: tuple[str, Any], fn: str | None = None) -> int:
    """Sequences/arrays that must have the same length (leading axis); returns it.

    ``check_same_length(("widths", widths), ("losses", losses), fn="plateau_start")``.
    """
    lengths = []
    for name, v in named:
        if v is None or isinstance(v, (str, bytes)):
            raise TypeError(f"{_where(fn)}{name} must be a sequence, got {_describe(v)}.")
        try:
            lengths.append(len(v) if not hasattr(v, "shape") else int(np.shape(v)[0]))
        except (TypeError, IndexError) as e:
            raise TypeError(
                f"{_where(fn)}{name} must be a sequence, got {_describe(v)}."
            ) from e
    if len(set(lengths)) > 1:
        got = ", ".join(f"len({nm}) = {k}" for (nm, _), k in zip(named, lengths, strict=True))
        raise ValueError(f"{_where(fn)}{' and '.join(nm for nm, _ in named)} must have the "
                         f"same length, got {got}.")
    return lengths[0] if lengths else 0


# --------------------------------------------------------------------------- results


def check_result_finite(value: Any, what: str, *, fn: str | None = None, hint: Any = ""):
    """Raise :class:`NonFiniteResultError` if a computed result has NaN/Inf entries.

    Eager only (a traced result passes through, to be caught by the caller, e.g. the loop's
    finiteness check).  ``hint`` (a string, or a callable returning one, evaluated only on
    failure) says what to do.  Returns ``value`` unchanged.
    """
    if not is_concrete(value):
        return value
    for leaf in jax.tree_util.tree_leaves(value):
        arr = np.asarray(leaf)
        if jnp.issubdtype(arr.dtype, jnp.inexact) and not np.all(np.isfinite(arr)):
            bad = int(arr.size - np.count_nonzero(np.isfinite(arr)))
            raise NonFiniteResultError(
                f"{_where(fn)}the result ({what}) has {bad} non-finite (NaN/Inf) entries out of "
                f"{arr.size}; " + ((hint() if callable(hint) else hint)
                                   or "check the inputs' scale and degenerate cases.")
            )
    return value
