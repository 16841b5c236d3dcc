"""Checkpoints for :func:`layerlab.loop.fit`: orbax steps, a run fingerprint, a lock, history.

Layout of a checkpoint directory::

    <dir>/<step>/arrays        orbax StandardSave of {"state", "best"}
    <dir>/<step>/meta          orbax JsonSave: step, fingerprint, early-stopping bookkeeping,
                               number of history rows covered
    <dir>/history.jsonl        the training history, one JSON line per chunk / evaluation,
                               appended at every save (never rewritten, except once on resume
                               to drop rows newer than the step resumed from)
    <dir>/history.jsonl.kept-<ns>  a copy of history.jsonl made before a resume that fell back
                               past newer steps dropped their rows, or rewrote a history.jsonl
                               that did not parse (read when a skipped step restores again)
    <dir>/.layerlab.lock       {"pid", "host", "start"} of the process writing the directory

* **Fallback**: :meth:`Checkpointer.resume` tries the steps newest first; a step whose meta,
  history rows or arrays do not restore is skipped with a :class:`CheckpointFallbackWarning`
  naming it and the step resumed from.  Nothing is deleted: a skipped step directory is
  renamed ``<step>.unrestorable-<time>`` only when the resumed run reaches that step again,
  and the history rows of the skipped steps are first copied to ``history.jsonl.kept-<ns>``,
  so a skipped step that restores later (a file server back) resumes with its rows.
* **Fingerprint**: everything that changes the result (see :func:`run_fingerprint`); a
  different one is refused with :class:`CheckpointMismatchError` listing saved vs now.
* **Lock**: one writer per directory (process 0 of a multi-process run); a second one gets
  :class:`CheckpointLockedError` naming the holder's pid; a lock whose process is gone (same
  host) is stale and taken over with a warning.  The holder refreshes the lock file's mtime
  every :data:`LOCK_HEARTBEAT_S` seconds (a daemon thread), so a lock of another host -- whose
  process cannot be checked, e.g. a preempted batch job restarted on another node of a shared
  file system -- is stale once not refreshed for :data:`LOCK_FOREIGN_STALE_S` seconds.
"""
from __future__ import annotations

import contextlib
import dataclasses
import dis
import gc
import hashlib
import json
import math
import os
import re
import socket
import sys
import time
import traceback
import types
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import numpy as np

from layerlab._checks import check_int
from layerlab.loop._chunks import is_traced_partial
from layerlab.loop._history import _to_py

__all__ = [
    "Checkpointing",
    "Checkpointer",
    "CheckpointLockedError",
    "CheckpointMismatchError",
    "CheckpointFallbackWarning",
    "run_fingerprint",
    "fingerprint_diff",
]

LOCK_NAME = ".layerlab.lock"
#: The lock holder touches its lock file this often (seconds).
LOCK_HEARTBEAT_S = 60.0
#: A lock of another host not refreshed for this long (seconds) is stale: its holder is gone
#: (15 heartbeats; a file server's clock may differ from this host's by less).
LOCK_FOREIGN_STALE_S = 900.0
HISTORY_NAME = "history.jsonl"
KEPT_HISTORY = HISTORY_NAME + ".kept-"  # + time.time_ns(): copies made before a fallback
FINGERPRINT_VERSION = 3


class Checkpointing(NamedTuple):
    """Checkpoint arguments of :func:`layerlab.loop.fit`, grouped.

    ``fit(..., checkpoint=Checkpointing("ckpt/run1", every=500, max_to_keep=2))`` is the same
    as ``checkpoint_dir=..., checkpoint_every=..., max_to_keep=...``.

    ``min_interval_s`` (only here, no flat ``fit`` argument): a periodic save that falls due
    less than this many seconds after the previous save in this process (or after training
    started or resumed) is skipped -- the final step's save and an early stop's always happen.
    For states whose save costs more than the steps between saves (a vmapped sweep of a large
    net on a GPU: seconds to copy and hash gigabytes against milliseconds a step); it changes
    only which steps are kept, never the result (the chunks and keys are the same), and a
    stop loses at most about ``min_interval_s`` plus one period of work -- and a ``callback``
    may then have run ahead of the newest checkpoint (after a restart it is called again for
    those steps).  The decision is taken once the previous chunk has been read, about when the
    chunk that ends at the save starts running.  ``None`` (default): every period.
    """

    directory: str | os.PathLike
    every: int | None = None
    max_to_keep: int | None = 2
    min_interval_s: float | None = None


class CheckpointLockedError(RuntimeError):
    """Another live process holds the checkpoint directory's lock."""


class CheckpointMismatchError(ValueError):
    """The checkpoint directory holds a different run (fingerprints differ)."""


class CheckpointFallbackWarning(UserWarning):
    """The newest checkpoint did not restore; an older one was used."""


# --------------------------------------------------------------------------- fingerprint


def _clear_frames(e: BaseException, keep: BaseException | None = None) -> BaseException:
    """``e`` with the locals of its traceback's finished frames cleared (its ``__cause__``,
    ``__context__`` and group members too), so the objects they held can be collected; the
    traceback itself stays printable.  ``keep`` (the exception the caller was handling when
    the failed call began, which becomes a ``__context__``) and its chain are left alone."""
    todo, seen = [e], set()
    while todo:
        x = todo.pop()
        if x is None or x is keep or id(x) in seen:
            continue
        seen.add(id(x))
        traceback.clear_frames(x.__traceback__)
        todo += [x.__cause__, x.__context__]
        if isinstance(x, BaseExceptionGroup):
            todo += list(x.exceptions)
    return e


_ORBAX_CODE = ("orbax", "tensorstore", "zarr")


def _orbax_unawaited(w: warnings.WarningMessage) -> bool:
    """A "coroutine ... was never awaited" RuntimeWarning of a coroutine in orbax's stack."""
    code = getattr(w.source, "cr_code", None)
    return (issubclass(w.category, RuntimeWarning) and "was never awaited" in str(w.message)
            and code is not None and any(k in code.co_filename for k in _ORBAX_CODE))


def _abstract(tree):
    def f(x):
        if isinstance(x, jax.Array):
            return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding)
        if isinstance(x, (np.ndarray, np.generic)):
            return jax.ShapeDtypeStruct(np.shape(x), np.asarray(x).dtype)
        if isinstance(x, (bool, int, float, complex)):  # restored as the array fit carried
            return jax.ShapeDtypeStruct((), jax.numpy.asarray(x).dtype)
        return x

    return jax.tree_util.tree_map(f, tree)


def _leaf_specs(tree) -> list[str]:
    out = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        dt = getattr(leaf, "dtype", None)
        dt = np.asarray(leaf).dtype if dt is None else dt
        out.append(f"{jax.tree_util.keystr(path)}: {tuple(np.shape(leaf))} {dt}")
    return out


def _host_bytes(leaf) -> bytes | None:
    if isinstance(leaf, jax.Array) and not leaf.is_fully_addressable:
        return None
    if isinstance(leaf, jax.Array) and jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
        leaf = jax.random.key_data(leaf)
    arr = np.ascontiguousarray(np.asarray(jax.device_get(leaf)))
    return arr.tobytes()


def content_hash(tree) -> str:
    """SHA-256 over every leaf's path, shape, dtype and bytes (``"unhashed"`` for leaves that
    are global multi-process arrays)."""
    h = hashlib.sha256()
    for spec, (_, leaf) in zip(_leaf_specs(tree),
                               jax.tree_util.tree_flatten_with_path(tree)[0], strict=True):
        h.update(spec.encode())
        b = _host_bytes(leaf)
        if b is None:
            return "unhashed (multi-process arrays)"
        h.update(b)
    return h.hexdigest()[:16]


def _code_digest(code) -> str:
    """12 hex digits of SHA-256 over a code object's bytecode, names and constants (nested
    code objects, e.g. lambdas and comprehensions, included): a changed loss body or a
    constant written into it changes the digest."""
    h = hashlib.sha256()

    def add(c, depth=0):
        h.update(c.co_code)
        h.update(repr((c.co_names, c.co_varnames, c.co_freevars)).encode())
        for k in c.co_consts:
            if hasattr(k, "co_code"):
                if depth < 20:
                    add(k, depth + 1)
            else:
                h.update(_canonical(k).encode())

    add(code)
    return h.hexdigest()[:12]


def _canonical(k) -> str:
    """``repr`` of a code constant, independent of string-hash randomisation (a frozenset
    constant, ``x in {"a", "b"}``, prints its items in a per-process order)."""
    if isinstance(k, frozenset):
        return "frozenset({" + ", ".join(sorted(_canonical(v) for v in k)) + "})"
    if isinstance(k, tuple):
        return "(" + ", ".join(_canonical(v) for v in k) + ",)"
    return repr(k)


def _dtype_name(v) -> str | None:
    """The name of a dtype given as a ``np.dtype``, a numpy / ml_dtypes scalar type or a
    ``jnp`` scalar type (``jnp.bfloat16``); ``None`` for anything else."""
    if isinstance(v, np.dtype):
        return v.name
    if isinstance(v, type) and (issubclass(v, np.generic)
                                or isinstance(getattr(v, "dtype", None), np.dtype)):
        try:
            return np.dtype(getattr(v, "dtype", v)).name
        except TypeError:  # pragma: no cover - an abstract numpy type (np.floating)
            return v.__qualname__
    return None


def _value_repr(v, depth: int = 0) -> str:
    """A ``repr`` of a hashable value independent of the process: set items sorted, dtypes
    by name, addresses dropped."""
    entry = _value_entry(v, depth)
    if entry is not None:
        return entry
    if isinstance(v, tuple) and depth < 10:
        return "(" + ", ".join(_value_repr(x, depth + 1) for x in v) + ",)"
    if v is None or isinstance(v, (bool, int, float, str)):
        return repr(v)
    if isinstance(v, (np.integer, np.floating)):
        return repr(v.item())
    return f"<{type(v).__qualname__}>"


def _value_entry(obj, depth: int = 0) -> str | None:
    """How the v4 walk's ``values`` list shows ``obj`` (``None``: not such a value)."""
    if isinstance(obj, (bool, int, float, str)) or obj is None:
        return None  # the walk's own entries (as older versions saved them)
    name = _dtype_name(obj)
    if name is not None:
        return f"<dtype {name}>"
    if isinstance(obj, complex):
        return repr(obj)
    if isinstance(obj, np.generic) and not isinstance(obj, (np.integer, np.floating)):
        return f"{type(obj).__name__}({obj!r})"  # np.complex64, np.bool_, np.str_, ...
    if isinstance(obj, (bytes, bytearray)):
        b = bytes(obj)
        return repr(b) if len(b) <= 64 else \
            f"<bytes {len(b)} #{hashlib.sha256(b).hexdigest()[:12]}>"
    if isinstance(obj, (slice, range)) and depth < 10:
        kind = type(obj).__name__
        return (f"{kind}({_value_repr(obj.start, depth + 1)}, {_value_repr(obj.stop, depth + 1)}"
                f", {_value_repr(obj.step, depth + 1)})")
    if isinstance(obj, (set, frozenset)) and depth < 10:
        items = sorted(_value_repr(v, depth + 1) for v in obj)
        if len(items) > 1000:
            digest = hashlib.sha256("\0".join(items).encode()).hexdigest()[:12]
            return f"<{type(obj).__name__} {len(items)} #{digest}>"
        return f"{type(obj).__name__}({{{', '.join(items)}}})"
    return None


WALK_VERSION = 4  # the walk of _closure_scalars; "walk" in a fingerprint since audit 2, 2026-11-29
_MAX_HASHED = 100_000  # entries past the listed 1000 folded into one digest entry (v4)
_MAX_VISITS = 200_000  # objects one walk looks at (v4)
_MISSING = object()


def _closure_scalars(fn: Callable, limit: int = 1000, *, legacy: bool = False,
                     mode: str | None = None, root: str = "step",
                     memo: dict | None = None, objects: list[str] | None = None,
                     values: list[str] | None = None) -> list[str]:
    """Names and hyper-parameters reachable from ``fn``: function qualnames with a digest of
    their code, the Python scalars/short strings/arrays captured by closures, defaults and
    the module globals a function reads (e.g. an optax learning rate, a regularisation
    constant, fixed random features: small arrays by value, larger ones by a content hash).

    ``mode`` (``legacy=True`` is ``mode="legacy"``) selects the walk, so entries saved by an
    older version can be compared with the same walk of today's function:

    * ``"v4"`` (default, since audit 2 of 2026-11-29): a function is the user's own when its
      code lives outside the standard library, installed packages and layerlab
      (:func:`_is_user_code`),
      wherever it is imported from, so helpers imported from the user's own modules are
      digested and their globals read; attributes the code reads from the user's modules,
      classes and plain namespaces (``helpers.SCALE``, ``args.l2``, ``cfg.lr``) are
      fingerprinted; containers are walked to the ``limit`` of listed entries and the
      entries past it (up to ``_MAX_HASHED``) are folded into one digest entry; strings
      longer than 64 characters by a hash.
    * ``"v3"`` (2026-11-29, audit 1, until audit 2): only functions of the script's module are
      digested and walked, at most 64 items per container, entries past ``limit`` dropped.
    * ``"legacy"`` (before 2026-11-29): no digests, array hashes or globals; 200 entries,
      10 levels.

    ``memo`` (``id -> (array, digest)``) shares array hashes between the walks of one
    fingerprint.

    ``objects`` (a list, filled when given; the v4 walk only): the entries of the user's own
    objects the walk reaches (instances of classes defined outside the standard library,
    installed packages and layerlab, :func:`_is_user_class`), which the list returned does
    not hold (it is what older versions saved, so their checkpoints still compare equal):

    * of a user dataclass (a flax ``nn.Module`` too), whose fields the returned list holds:
      the code digest, closure, defaults and globals of every method defined on its class and
      on its user-defined bases (a changed ``__call__``, or a global it reads), and their
      other class attributes;
    * of any other user object (a callable object, ``obj.step``'s ``obj``, a settings
      object): its class's qualname, its instance attributes (by the rules above: scalars,
      strings, arrays, nested functions and objects), its methods and class attributes.
      Of the step's own object (the callable object passed, ``obj`` of ``obj.step``), only
      the instance attributes its methods read as ``self.<attr>`` (:func:`_self_reads`;
      all of them when a method uses ``self`` otherwise, e.g. passes it on): bookkeeping
      the step never reads (``self.started = time.time()``) does not refuse a resume.

    Those of a bound method's ``__self__`` come under ``<label>.<self>``.  They are walked
    after everything else (an object the returned list reaches is not listed again) with
    their own ``limit``.  Classes of layerlab, of installed packages and of the standard
    library add nothing here (their code is versioned).

    ``values`` (a list, filled when given; the v4 walk only; audit 4, 2026-11-30): the
    entries of values that older walks passed over although they change results, wherever
    the walk reaches them (closures, defaults, globals, containers, fields, user objects):
    dtypes (``jnp.bfloat16``, ``np.float32``, ``np.dtype("float16")``, by name, a global
    one too), ``complex`` and other numpy scalars, ``bytes``, ``slice``, ``range`` and
    ``set`` / ``frozenset`` (items sorted by their canonical ``repr``) -- see
    :func:`_value_entry`.  Kept apart from the list returned for the same reason as
    ``objects``: a step that reaches none has the fingerprint older versions saved.
    """
    mode = "legacy" if legacy else (mode or "v4")
    if mode not in ("legacy", "v3", "v4"):
        raise ValueError(f"unknown walk {mode!r}")
    legacy, v4 = mode == "legacy", mode == "v4"
    out: list[str] = []
    seen: set[int] = set()
    memo = {} if memo is None else memo
    over = {"n": 0, "visits": 0, "stopped": False, "h": hashlib.sha256()}
    user_objects = v4 and objects is not None
    pending: list[tuple[str, Any, int, str]] = []  # user objects, walked after the rest

    if legacy:  # the entries of checkpoints saved before 2026-11-29 (compared on resume)
        limit = 200
    max_depth = 10 if legacy else 24
    per_container = None if v4 else 64

    def emit(s: str) -> None:
        if len(out) < limit:
            out.append(s)
        else:  # v4 only (the other walks stop at the limit)
            over["n"] += 1
            over["h"].update(s.encode() + b"\0")

    def full() -> bool:
        if len(out) < limit:
            return False
        return not v4 or over["n"] >= _MAX_HASHED

    def array_tag(obj) -> str:
        if legacy:
            return ""
        hit = memo.get(id(obj))
        if hit is None or hit[0] is not obj:  # (the entry holds obj: its id is not reused)
            b = _host_bytes(obj)
            hit = memo[id(obj)] = (obj, "" if b is None
                                   else " #" + hashlib.sha256(b).hexdigest()[:12])
        return hit[1]

    def visit(obj, depth, label):
        if full() or depth > max_depth:
            return
        if v4:
            over["visits"] += 1
            if over["visits"] > _MAX_VISITS:
                over["stopped"] = True
                return
        if obj is None or isinstance(obj, (bool, int, float, np.integer, np.floating)):
            emit(f"{label}={obj!r}" if not isinstance(obj, float) or math.isfinite(obj)
                 else f"{label}={obj}")
            return
        if values is not None and v4:
            entry = _value_entry(obj)
            if entry is not None:
                values.append(f"{label}={entry}")
                return
        if isinstance(obj, str):
            if len(obj) <= 64:
                emit(f"{label}={obj!r}")
            elif v4:
                emit(f"{label}=<str {len(obj)} #"
                     f"{hashlib.sha256(obj.encode(errors='replace')).hexdigest()[:12]}>")
            return
        if id(obj) in seen:
            return
        seen.add(id(obj))
        if isinstance(obj, (np.ndarray, jax.Array)) and not isinstance(obj, jax.core.Tracer):
            if obj.size <= 16 and not jax.dtypes.issubdtype(obj.dtype, jax.dtypes.prng_key):
                try:
                    emit(f"{label}={np.asarray(obj).tolist()!r}")
                except Exception:  # pragma: no cover - non-addressable
                    emit(f"{label}=<array {obj.shape} {obj.dtype}>")
            else:
                emit(f"{label}=<array {tuple(obj.shape)} {obj.dtype}{array_tag(obj)}>")
            return
        if isinstance(obj, (tuple, list)):
            for i, v in enumerate(obj[:per_container]):
                visit(v, depth + 1, f"{label}[{i}]")
            return
        if isinstance(obj, dict):
            for k in list(obj)[:per_container]:
                visit(obj[k], depth + 1, f"{label}[{_key_label(k)}]")
            return
        if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            emit(f"{label}:{type(obj).__qualname__}")
            for fld in dataclasses.fields(obj)[:per_container]:
                visit(getattr(obj, fld.name, None), depth + 1, f"{label}.{fld.name}")
            if user_objects and _is_user_class(type(obj)):
                pending.append(("class", type(obj), depth, label))
            return
        func = getattr(obj, "func", None)
        if func is not None and hasattr(obj, "keywords"):  # functools.partial
            visit(func, depth + 1, f"{label}.func")
            visit(obj.args, depth + 1, f"{label}.args")
            visit(obj.keywords, depth + 1, f"{label}.keywords")
            return
        if user_objects and isinstance(obj, types.MethodType):  # obj.method: obj's entries
            owner = obj.__self__
            if not isinstance(owner, type) and _is_user_class(type(owner)):
                pending.append(("self", owner, depth, f"{label}.<self>"))
        wrapped = getattr(obj, "__wrapped__", None)
        if wrapped is not None and callable(obj):
            visit(wrapped, depth + 1, label)
            return
        code = getattr(obj, "__code__", None)
        if code is not None:
            user = not legacy and _is_user_code(code, extended=v4)
            emit(f"{label}:{getattr(obj, '__qualname__', code.co_name)}"
                 + (f"#{_code_digest(code)}" if user else ""))
            cells = getattr(obj, "__closure__", None) or ()
            freevars = {}
            for name, cell in zip(code.co_freevars, cells, strict=False):
                try:
                    v = cell.cell_contents
                except ValueError:  # empty cell
                    continue
                freevars[name] = v
                visit(v, depth + 1, f"{label}.{name}")
            visit(getattr(obj, "__defaults__", None) or (), depth + 1, f"{label}.defaults")
            visit(getattr(obj, "__kwdefaults__", None) or {}, depth + 1, f"{label}.kwdefaults")
            # module globals it reads: settings and helper functions of the user's code
            # (not classes; not for library code, which is versioned, and whose module
            # state, e.g. caches, may differ between processes)
            glb = (getattr(obj, "__globals__", None) or {}) if user else {}
            for name in _global_names(code):
                if name.startswith("__"):
                    continue
                v = glb.get(name)
                if values is not None and v4 and _dtype_name(v) is not None:
                    visit(v, depth + 1, f"{label}.<global {name}>")  # a compute dtype
                    continue
                if v is None or isinstance(v, type) or type(v).__name__ == "module":
                    continue
                if v4:
                    if callable(v) and not _is_user_callable(v):
                        continue  # a library function or object
                elif getattr(v, "__module__", None) not in (None, glb.get("__name__")) \
                        and callable(v):
                    continue  # a function imported from a library
                visit(v, depth + 1, f"{label}.<global {name}>")
            if v4 and user:  # attributes read from the user's modules and namespaces
                for (deref, name), chains in _attr_chains(code).items():
                    v = freevars.get(name, _MISSING) if deref else glb.get(name, _MISSING)
                    for chain in chains:
                        follow(v, chain, depth + 1,
                               f"{label}.{name}" if deref else f"{label}.<global {name}")
            return
        if user_objects and not isinstance(obj, type) and _is_user_class(type(obj)):
            pending.append(("object", obj, depth, label))

    def visit_object(kind, obj, depth, label):
        """The entries of a user object (``objects``): see the docstring."""
        # the step's own object (``obj.step``'s ``obj``, a callable step object): only the
        # attributes its methods read (None: a method uses ``self`` whole, so all of them)
        reads = _self_reads(type(obj)) if kind == "self" or depth == 0 else None
        if kind == "self":  # not seen by the main walk: walked as any user object
            if id(obj) in seen:
                return
            seen.add(id(obj))
            kind = "class" if dataclasses.is_dataclass(obj) else "object"
            if kind == "class":
                emit(f"{label}:{type(obj).__qualname__}")
                for fld in dataclasses.fields(obj):
                    visit(getattr(obj, fld.name, None), depth + 1, f"{label}.{fld.name}")
        if kind == "object":
            emit(f"{label}:<object {type(obj).__qualname__}>")
            attrs = getattr(obj, "__dict__", None)
            attrs = dict(attrs) if isinstance(attrs, dict) else {}
            for c in type(obj).__mro__:
                for name in getattr(c, "__dict__", {}).get("__slots__", ()) or ():
                    if isinstance(name, str) and name not in attrs:
                        attrs[name] = _static_slot(obj, c, name)
            for name in sorted(attrs, key=str):
                if attrs[name] is not _MISSING and (reads is None or name in reads):
                    visit(attrs[name], depth + 1, f"{label}.{name}")
        cls = obj if isinstance(obj, type) else type(obj)
        fields = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) \
            else set()
        for c in cls.__mro__:
            if c is object or not _is_user_class(c):
                continue
            for name, v in sorted(vars(c).items(), key=lambda kv: str(kv[0])):
                fns = _class_functions(v)
                for i, f in enumerate(fns):
                    if not _generated(f, c):
                        visit(f, depth + 1, f"{label}.<method {c.__qualname__}.{name}"
                              + (f"[{i}]>" if i else ">"))
                if not fns and not isinstance(v, type) and isinstance(name, str) \
                        and not name.startswith("_") and name not in fields:
                    # a class attribute (not a dataclass field's default: the instance's
                    # field is listed; not a private one: flax keeps its internals there)
                    visit(v, depth + 1, f"{label}.<class {c.__qualname__}>.{name}")

    def follow(obj, chain, depth, label):
        """Visit what ``obj.a.b...`` reads, through user modules, classes and namespaces."""
        for i, attr in enumerate(chain):
            if not _is_namespace(obj):
                break
            obj = _static_attr(obj, attr)
            if obj is _MISSING:
                return
            if not _is_namespace(obj):
                if callable(obj) and not isinstance(obj, type) and not _is_user_callable(obj):
                    return
                tail = "." + ".".join(chain[:i + 1])
                visit(obj, depth, label + tail + (">" if "<global" in label else ""))
                return

    visit(fn, 0, root)
    if over["n"]:
        out.append(f"{root}:<{over['n']} more entries #{over['h'].hexdigest()[:12]}>")
    if over["stopped"]:
        out.append(f"{root}:<walk stopped after {_MAX_VISITS} objects>")
    if user_objects and pending:
        main = out
        out = objects  # emit() writes here now (visit and emit read `out` when called)
        over.update(n=0, visits=0, stopped=False, h=hashlib.sha256())
        while pending and not full() and not over["stopped"]:
            visit_object(*pending.pop(0))
        if over["n"]:
            out.append(f"{root}:<{over['n']} more entries #{over['h'].hexdigest()[:12]}>")
        if over["stopped"]:
            out.append(f"{root}:<walk stopped after {_MAX_VISITS} objects>")
        out = main
    return out


_LIBRARY_DIRS = tuple({os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,
                       *(p + os.sep for p in sys.path if p.rstrip(os.sep).endswith(
                           ("site-packages", "dist-packages")))})


def _extended_library_dirs() -> tuple[str, ...]:
    """:data:`_LIBRARY_DIRS` plus the interpreter's package paths and the install folders of
    the numerical stack (an editable or vendored jax, flax, optax, numpy, orbax is a library
    wherever it lives)."""
    import importlib.util
    import sysconfig

    dirs = set(_LIBRARY_DIRS)
    for k in ("stdlib", "platstdlib", "purelib", "platlib"):
        p = sysconfig.get_paths().get(k)
        if p:
            dirs.add(os.path.abspath(p) + os.sep)
    for name in ("jax", "jaxlib", "flax", "optax", "numpy", "scipy", "orbax", "chex",
                 "equinox", "tensorstore"):
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        for p in (spec.submodule_search_locations or []) if spec else []:
            dirs.add(os.path.abspath(p) + os.sep)
    return tuple(sorted(dirs))


_LIBRARY_DIRS_V4: tuple[str, ...] | None = None


def _is_user_path(filename: str, extended: bool = True) -> bool:
    global _LIBRARY_DIRS_V4
    if filename.startswith("<") and filename not in ("<stdin>", "<string>") \
            and not filename.startswith("<ipython-input-"):
        return False  # frozen / built-in (not the terminal IPython's cells)
    if extended and _LIBRARY_DIRS_V4 is None:
        _LIBRARY_DIRS_V4 = _extended_library_dirs()
    stdlib = os.path.dirname(os.__file__) + os.sep
    dirs = _LIBRARY_DIRS_V4 if extended else _LIBRARY_DIRS
    return not os.path.abspath(filename).startswith(dirs + (stdlib,))


def _is_user_code(code, extended: bool = False) -> bool:
    """A function of the user's own code (not layerlab's, not an installed package's, not
    the standard library's): its code digest and the globals it reads are fingerprinted.
    ``extended``: also not under the interpreter's package paths or the numerical stack's
    install folders (the v4 walk)."""
    return _is_user_path(code.co_filename, extended)


def _is_user_module(mod) -> bool:
    """A module of the user's own code (by where its file lives; ``__main__`` of an
    interactive session, which has no file, too)."""
    f = getattr(mod, "__file__", None)
    if not isinstance(f, str):
        return getattr(mod, "__name__", None) == "__main__"
    return _is_user_path(f)


def _is_user_callable(v, depth: int = 0) -> bool:
    """A function (or ``partial`` / ``jit`` wrapper of one) whose code is the user's own, or
    an instance of a class the user defined."""
    if depth > 10:
        return False
    func = getattr(v, "func", None)
    if func is not None and hasattr(v, "keywords"):
        return _is_user_callable(func, depth + 1)
    wrapped = getattr(v, "__wrapped__", None)
    if wrapped is not None:
        return _is_user_callable(wrapped, depth + 1)
    code = getattr(v, "__code__", None)
    if code is not None:
        return _is_user_code(code, extended=True)
    return _is_user_class(type(v))


def _is_user_class(cls) -> bool:
    return _is_user_module(sys.modules.get(getattr(cls, "__module__", None) or ""))


def _class_functions(v) -> list:
    """The functions a class attribute holds: a function, a static or class method's,
    a property's getter, setter and deleter, a ``cached_property``'s function."""
    import functools

    if isinstance(v, (staticmethod, classmethod)):
        v = v.__func__
    if isinstance(v, property):
        return [f for f in (v.fget, v.fset, v.fdel) if f is not None]
    if isinstance(v, functools.cached_property):
        return [v.func]
    return [v] if hasattr(v, "__code__") or hasattr(v, "__wrapped__") else []


def _generated(f, cls) -> bool:
    """A method ``dataclasses`` (or flax's dataclass transform) wrote for ``cls``
    (``__init__``, ``__eq__``, ``__repr__`` under its wrapper, ...): compiled from a string,
    decided by the fields, in a class whose module has a file."""
    for _ in range(10):
        inner = getattr(f, "__wrapped__", None)
        if inner is None:
            break
        f = inner
    code = getattr(f, "__code__", None)
    return (code is not None and code.co_filename == "<string>"
            and isinstance(getattr(sys.modules.get(cls.__module__), "__file__", None), str))


def _static_slot(obj, cls, name):
    """The value of slot ``name`` of ``obj`` (``_MISSING`` if unset), without running user
    code."""
    d = vars(cls).get(name)
    try:
        return d.__get__(obj, cls) if hasattr(d, "__get__") else _MISSING
    except AttributeError:
        return _MISSING


def _is_namespace(obj) -> bool:
    """Something whose attributes are settings: a user module or class, an instance of a user
    class, or a ``SimpleNamespace`` / ``argparse.Namespace``."""
    import argparse

    if isinstance(obj, types.ModuleType):
        return _is_user_module(obj)
    if isinstance(obj, (types.SimpleNamespace, argparse.Namespace)):
        return True
    if isinstance(obj, type):
        return _is_user_class(obj)
    if callable(obj) or dataclasses.is_dataclass(obj) or isinstance(
            obj, (str, bytes, int, float, complex, tuple, list, dict, set, frozenset,
                  np.ndarray, np.generic, jax.Array)):
        return False
    return _is_user_class(type(obj))


def _static_attr(obj, attr):
    """``obj.attr`` without running properties or ``__getattr__`` (``_MISSING`` if absent)."""
    import inspect

    try:
        return inspect.getattr_static(obj, attr)
    except AttributeError:
        return _MISSING
    except Exception:  # pragma: no cover - an exotic metaclass
        return _MISSING


def _global_names(code, depth: int = 0) -> list[str]:
    """The global names a code object (and its nested code objects) reads: the arguments
    of ``LOAD_GLOBAL`` / ``LOAD_NAME`` (``co_names`` also holds attribute names:
    ``state.params`` must not make a global ``params`` part of the fingerprint)."""
    names = [ins.argval for ins in dis.get_instructions(code)
             if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME") and isinstance(ins.argval, str)]
    if depth < 20:
        for k in code.co_consts:
            if hasattr(k, "co_names"):
                names += _global_names(k, depth + 1)
    return list(dict.fromkeys(names))


_ATTR_OPS = ("LOAD_ATTR", "LOAD_METHOD")


def _attr_chains(code, depth: int = 0, out: dict | None = None) -> dict[tuple, list[tuple]]:
    """``{(deref, name): [(attr, attr, ...), ...]}``: the attribute chains the code (and its
    nested code objects) reads from a global (``deref`` False) or closure variable (True),
    e.g. ``helpers.SCALE``, ``args.opt.lr``: ``LOAD_GLOBAL`` / ``LOAD_NAME`` /
    ``LOAD_DEREF`` followed by ``LOAD_ATTR`` / ``LOAD_METHOD``."""
    out = {} if out is None else out
    ins = list(dis.get_instructions(code))
    for j, i in enumerate(ins):
        if i.opname not in ("LOAD_GLOBAL", "LOAD_NAME", "LOAD_DEREF") \
                or not isinstance(i.argval, str):
            continue
        chain = []
        for k in ins[j + 1:j + 9]:
            if k.opname not in _ATTR_OPS or not isinstance(k.argval, str):
                break
            chain.append(k.argval)
        if chain:
            lst = out.setdefault((i.opname == "LOAD_DEREF", i.argval), [])
            if tuple(chain) not in lst:
                lst.append(tuple(chain))
    if depth < 20:
        for k in code.co_consts:
            if hasattr(k, "co_code"):
                _attr_chains(k, depth + 1, out)
    return out


_SELF_LOADS = ("LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_DEREF")


def _self_reads(cls: type) -> set[str] | None:
    """The attribute names the methods of ``cls`` (and of its user-defined bases, their
    nested functions included) read from ``self`` (``self.lr``, ``self.step(...)``; not
    those only written, ``self.started = time.time()``),
    or ``None`` when one uses ``self`` otherwise (passes it on, ``vars(self)``,
    ``getattr(self, name)``, ``self.n += 1``): then any attribute may be read."""
    names: set[str] = set()

    def scan(code, me, depth=0) -> bool:
        ins = list(dis.get_instructions(code))
        for j, i in enumerate(ins):
            if i.opname not in _SELF_LOADS or i.argval != me:
                continue
            nxt = ins[j + 1] if j + 1 < len(ins) else None
            if nxt is not None and nxt.opname in _ATTR_OPS and isinstance(nxt.argval, str):
                names.add(nxt.argval)
            elif nxt is None or nxt.opname not in ("STORE_ATTR", "DELETE_ATTR"):
                return False
        for k in code.co_consts:
            if hasattr(k, "co_code") and me in k.co_freevars + k.co_varnames:
                if depth >= 20 or not scan(k, me, depth + 1):
                    return False
        return True

    for c in cls.__mro__:
        if c is object or not _is_user_class(c):
            continue
        for v in vars(c).values():
            if isinstance(v, (staticmethod, classmethod)):
                continue
            for f in _class_functions(v):
                for _ in range(10):  # under decorators' wrappers
                    f = getattr(f, "__wrapped__", None) or f
                code = getattr(f, "__code__", None)
                if code is None:
                    return None  # an opaque callable: assume it reads anything
                if code.co_argcount < 1:  # ``def f(*args)``: self is args[0]
                    if code.co_flags & 0x04:  # CO_VARARGS
                        return None
                    continue
                if not scan(code, code.co_varnames[0]):
                    return None
    return names


def run_fingerprint(*, step, state, data, key_data, total, batch_size, n, runs,
                    data_runs_axis, early_stopping=None, eval_every=None,
                    eval_at_start=False, eval_fn=None, key_impl=None) -> dict[str, Any]:
    """Everything that changes the result of ``fit``: compared on resume.

    ``state``: the tree structure, every leaf's shape/dtype and a content hash of the *initial*
    state (covers the initialisation and hyper-parameters kept in the state, e.g.
    ``TrainState.hparams`` or ``optax.inject_hyperparams``); ``step``: the qualnames and the
    scalars captured by its closure, dataclass fields included (the optimizer's hyper-parameters
    for :func:`layerlab.loop.optax_step`), and for a ``Partial`` step of arrays a content hash
    of the bound arrays; ``data``: shapes/dtypes and a content hash (computed once per ``fit``
    call); ``total`` steps, ``batch_size``, ``n``, ``runs`` and the key; the evaluation period
    ``eval_every`` (it decides the steps of the saved evaluation history; checkpoints saved
    before it was recorded, 2026-11-29, are not compared on it); with early stopping, its
    settings and the evaluation schedule (they decide where the run stops and which state it
    returns); ``eval_fn`` described as ``step`` is (its code, the settings and arrays it
    captures or binds: they decide the saved evaluation history and, with early stopping, where
    the run stops); the key's implementation (``rbg`` and ``unsafe_rbg`` keys hold the same
    data) and ``jax_threefry_partitionable`` (the same threefry key draws other streams under
    the other setting).  ``step_objects`` / ``eval_fn_objects`` (only when there are some): the
    user's own objects reached from ``step`` / ``eval_fn`` -- the methods' code and the
    attributes of a flax module or dataclass defined in the user's code, of a callable object,
    of ``obj`` in a bound method ``obj.step`` (see the ``objects`` argument of
    :func:`_closure_scalars`).  A step built from layerlab's own code and configs, a plain
    function, closure, ``partial`` or ``Partial`` has none: its fingerprint is the one earlier
    versions saved.
    """
    memo: dict[int, tuple] = {}
    step_objects: list[str] = []
    eval_objects: list[str] = []
    step_values: list[str] = []
    eval_values: list[str] = []
    fp = {
        "version": FINGERPRINT_VERSION,
        "total": int(total),
        "batch_size": batch_size,
        "n": int(n),
        "runs": runs,
        "data_runs_axis": bool(data_runs_axis),
        "key": [int(v) for v in np.asarray(key_data).ravel().tolist()],
        "state_structure": str(jax.tree_util.tree_structure(state)),
        "state_leaves": _leaf_specs(state),
        "state_hash": content_hash(state),
        "walk": WALK_VERSION,
        "step": _closure_scalars(step, memo=memo, objects=step_objects, values=step_values),
        # the same walk as older versions did it, for their checkpoints only
        "step_v3": _closure_scalars(step, mode="v3", memo=memo),
        "step_legacy": _closure_scalars(step, legacy=True),
        "data_leaves": _leaf_specs(data),
        "data_hash": content_hash(data),
    }
    if is_traced_partial(step):  # its bound arrays are program inputs: hashed like the data
        fp["step_bound_hash"] = content_hash((step.args, step.keywords))
    fp["eval_fn"] = None if eval_fn is None else _closure_scalars(
        eval_fn, root="eval_fn", memo=memo, objects=eval_objects, values=eval_values)
    if eval_fn is not None:  # the v3 walk beside it: which differences are the v4 walk's alone
        fp["eval_fn_v3"] = _closure_scalars(eval_fn, root="eval_fn", mode="v3", memo=memo)
    fp["key_impl"] = None if key_impl is None else str(key_impl)
    # JAX's switch of the threefry keys' random streams (split, fold_in, bits): the same key
    # under the other setting draws other batches, dropout masks and noise; added
    # 2026-11-30 (a checkpoint saved before lacks it: not compared on it)
    fp["rng_config"] = {"jax_threefry_partitionable":
                        bool(jax.config.jax_threefry_partitionable)}
    # the evaluation schedule decides which steps the saved history's evaluations are at: a
    # resume with another one would mix two schedules in one history (eval_every needs eval_fn)
    fp["eval_every"] = None if eval_every is None else int(eval_every)
    es = early_stopping
    fp["early_stopping"] = None if es is None else {
        "metric": es.metric, "mode": es.mode, "patience": int(es.patience),
        "min_delta": float(es.min_delta), "restore_best": bool(es.restore_best),
        "eval_every": None if eval_every is None else int(eval_every),
        "eval_at_start": bool(eval_at_start)}
    # added 2026-11-29 (audit 3), only where there are some: the fingerprints of every other
    # step are those of earlier versions, so their checkpoints resume
    if step_objects:
        fp["step_objects"] = step_objects
    if eval_objects:
        fp["eval_fn_objects"] = eval_objects
    # added 2026-11-30 (audit 4), the same way: dtypes, complex, bytes, slices, ranges and
    # sets reached from the step / eval_fn (see the ``values`` argument of _closure_scalars)
    if step_values:
        fp["step_values"] = step_values
    if eval_values:
        fp["eval_fn_values"] = eval_values
    return fp


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _key_label(k) -> str:
    """A dict key as the walk labels it: its ``repr`` without memory addresses (a function or
    object key's ``<function f at 0x7f...>`` differs between two processes of one script)."""
    return _ADDRESS.sub("", repr(k))


def _short(v, width=120) -> str:
    s = repr(v)
    return s if len(s) <= width else s[: width - 3] + "..."


_COMPAT_KEYS = ("walk", "step_v3", "step_legacy", "eval_fn_v3")  # how to compare, never compared
# entries added later (audit 2 of 2026-11-29: eval_fn, key_impl; after it, the same day:
# eval_every without early stopping; 2026-11-30: rng_config): a checkpoint saved before has
# none (not compared on them)
_LATER_KEYS = ("eval_fn", "key_impl", "eval_every", "rng_config")
# present only when the step / eval_fn reaches the user's own objects (audit 3, 2026-11-29); a
# checkpoint saved before has none: not comparable (the caller warns), never a refusal
_OBJECT_KEYS = ("step_objects", "eval_fn_objects")
# present only when the step / eval_fn reaches dtypes, complex numbers, bytes, slices, ranges
# or sets (audit 4, 2026-11-30); treated as _OBJECT_KEYS are (a checkpoint saved before
# lacks them: not comparable, the caller warns)
_VALUE_KEYS = ("step_values", "eval_fn_values")
_ADDED_KEYS = _OBJECT_KEYS + _VALUE_KEYS


def fingerprint_diff(saved: dict[str, Any], now: dict[str, Any],
                     soft: list[str] | None = None,
                     unchecked: list[str] | None = None) -> list[str]:
    """Human-readable differences ``key: saved X, now Y`` (lists: the differing entries).

    ``soft`` (a list, filled when given): differences of the step / ``eval_fn`` walk that are
    the v4 walk's alone (the v3 walk of both is equal: the user's helper modules, module and
    namespace attributes, container entries past 64).  They are reported there (the caller
    warns) instead of refusing the resume: what the v4 walk adds also reaches trace-time
    caches (a helper's memo dict filled while the step is traced holds what the process
    traced before ``fit``), which differ between two processes of one script.

    ``unchecked`` (a list, filled when given): the ``step_objects`` / ``eval_fn_objects``
    keys ``now`` has and ``saved`` lacks: a checkpoint of a version that did not fingerprint
    the user's objects (before audit 3, 2026-11-29), and the ``step_values`` /
    ``eval_fn_values`` keys likewise (before audit 4, 2026-11-30), which cannot be compared on
    them (the caller warns).  Differences of those keys otherwise refuse, as the step's do.
    """
    lines = []
    for k in _ADDED_KEYS:  # saved, but this run reaches no user object / such value
        if k in saved and k not in now:
            what = "the user's own objects" if k in _OBJECT_KEYS else \
                "dtypes, complex numbers, bytes, slices, ranges or sets"
            lines.append(f"{k}: saved {_short(saved[k][:3])}, now <absent> (the step or "
                         f"eval_fn no longer reaches {what})")
    for k, v in now.items():
        s = saved.get(k, "<absent>")
        if s == v or (v is None and k not in saved):  # a key added later, unused here
            continue
        if k in _ADDED_KEYS and k not in saved:
            if unchecked is not None:
                unchecked.append(k)
            continue
        if k in _COMPAT_KEYS or (k in _LATER_KEYS and k not in saved):
            continue
        if (k in ("step", "eval_fn") and "walk" in saved and isinstance(s, list)
                and isinstance(v, list) and saved.get(f"{k}_v3") is not None
                and saved.get(f"{k}_v3") == now.get(f"{k}_v3")):
            if soft is not None:
                soft.append(f"{k}: saved {_short([e for e in s if e not in v][:3])}, "
                            f"now {_short([e for e in v if e not in s][:3])}")
            continue
        if k == "step" and isinstance(s, list) and "walk" not in saved:
            # saved by an older walk: compared with the entries that walk computes today,
            # i.e. before code digests, array hashes, globals and the larger search limits
            # (2026-11-29; no "step_legacy" saved), or before user helper modules, module
            # attributes and containers past 64 entries (audit 2, 2026-11-29; no "walk" saved)
            old = now.get("step_v3" if "step_legacy" in saved else "step_legacy")
            if old is not None:
                v = old
            if s == v:
                continue
        if k == "rng_config":
            lines.append(f"rng_config: saved {s!r}, now {v!r} (the threefry keys draw other "
                         "random streams under the other setting; resume under the saved one, "
                         "jax.config.update('jax_threefry_partitionable', ...), or use a new "
                         "checkpoint_dir)")
            continue
        if k == "eval_every":
            lines.append(f"eval_every: saved {s!r}, now {v!r} (the saved history holds the "
                         f"evaluations of eval_every={s!r}; resume with eval_every={s!r}, or "
                         "use a new checkpoint_dir for the new schedule)")
            continue
        if isinstance(s, list) and isinstance(v, list):
            only_s = [e for e in s if e not in v][:3]
            only_n = [e for e in v if e not in s][:3]
            if not only_s and not only_n:
                only_s, only_n = s[:3], v[:3]
            lines.append(f"{k}: saved {_short(only_s)}, now {_short(only_n)}")
        else:
            lines.append(f"{k}: saved {_short(s)}, now {_short(v)}")
    return lines


# --------------------------------------------------------------------------- lock


def _proc_start(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class _Lock:
    def __init__(self, directory: str):
        self.path = os.path.join(directory, LOCK_NAME)
        self.held = False
        self.lost = False  # the lock was taken over while held (see _start_heartbeat)
        self._token = ""
        self._beat: Any = None  # (thread, stop event) of the heartbeat while held

    def _start_heartbeat(self) -> None:
        """Touch the lock file every LOCK_HEARTBEAT_S seconds while it is still ours (its
        token); a lock found taken over (another process judged it stale: a holder suspended
        past LOCK_FOREIGN_STALE_S, say) sets ``lost`` and stops refreshing it, so the new
        holder's lock is never kept fresh by the old one, and ``Checkpointer.save`` refuses to
        write beside the new holder."""
        import threading

        stop = threading.Event()
        period = float(LOCK_HEARTBEAT_S)

        def beat():
            while not stop.wait(period):
                holder = self._read()
                if holder and holder.get("token") != self._token:
                    self.lost = True
                    return
                try:
                    os.utime(self.path)
                except OSError:
                    pass  # the file server is away: the next beat tries again

        t = threading.Thread(target=beat, name="layerlab-lock-heartbeat", daemon=True)
        self._beat = (t, stop)  # before start: an interrupt in between leaves nothing running
        t.start()

    def _stop_heartbeat(self) -> None:
        if self._beat is not None:
            t, stop = self._beat
            stop.set()
            t.join(timeout=5.0)
            self._beat = None

    def _age(self) -> float | None:
        """Seconds since the lock file was last written or refreshed, by the file system's
        clock (a file written now beside it: a file server's clock may differ from this
        host's), at least 0; ``None`` when the lock cannot be read."""
        try:
            then = os.path.getmtime(self.path)
        except OSError:
            return None
        now = time.time()
        try:
            import tempfile

            fd, tmp = tempfile.mkstemp(prefix=".layerlab.now-", dir=os.path.dirname(self.path))
            os.close(fd)
            try:
                now = os.path.getmtime(tmp)
            finally:
                os.remove(tmp)
        except OSError:
            pass
        return max(0.0, now - then)

    def acquire(self) -> None:
        import uuid

        self._token = uuid.uuid4().hex
        # "heartbeat": this holder refreshes the lock (a foreign lock without it, written by an
        # older layerlab, is never judged stale by its age)
        me = {"pid": os.getpid(), "host": socket.gethostname(), "start": _proc_start(os.getpid()),
              "time": time.time(), "token": self._token, "heartbeat": float(LOCK_HEARTBEAT_S)}
        # each pass that finds another takeover in progress waits 50 ms; the deadline outlasts
        # the 10 s after which a takeover mutex left by a killed process is removed
        deadline = time.monotonic() + 15.0
        while time.monotonic() < deadline:
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                holder = self._read()
                beats = (holder.get("host") != socket.gethostname()
                         and isinstance(holder.get("pid"), int) and "heartbeat" in holder)
                if not self._stale(holder):
                    age = self._age()
                    more = (f" Its holder on another host refreshed it {age:.0f} s ago; it "
                            f"counts as stale after {LOCK_FOREIGN_STALE_S:.0f} s without a "
                            "refresh." if beats and age is not None else
                            " It was written by a layerlab without a lock heartbeat, so its age "
                            "says nothing." if holder.get("host") != socket.gethostname()
                            and isinstance(holder.get("pid"), int) else "")
                    raise CheckpointLockedError(
                        f"fit: checkpoint_dir {os.path.dirname(self.path)} is locked by process "
                        f"pid {holder.get('pid')} on host {holder.get('host')!r} (lock file "
                        f"{self.path}); two writers would corrupt it. Wait for that run to end, "
                        "use another checkpoint_dir, or delete the lock file if that process "
                        f"is gone.{more}"
                    ) from None
                age = self._age()
                if self._remove_stale(holder):
                    why = (f"on host {holder.get('host')!r}, not refreshed for {age:.0f} s"
                           if beats and age is not None else
                           "its lock file could not be read" if beats else "no longer running")
                    warnings.warn(
                        f"fit: removed the stale lock {self.path} of process pid "
                        f"{holder.get('pid')} ({why}).",
                        RuntimeWarning, stacklevel=4,
                    )
                continue
            with os.fdopen(fd, "w") as f:
                json.dump(me, f)
            self.held = True
            self._start_heartbeat()
            return
        raise CheckpointLockedError(f"fit: could not take the lock {self.path}.")

    def _remove_stale(self, holder: dict) -> bool:
        """Remove the lock file if it still holds ``holder``'s record and is still stale,
        under a takeover mutex (``<lock>.takeover``, created with ``O_EXCL``): two restarts
        that both judged the same lock stale could otherwise each remove it, the slower one
        removing the faster one's fresh lock, and both would write.  Here the slower one
        re-reads the lock under the mutex, finds the fresh holder and backs off.  ``False``
        when nothing was removed (the lock changed, or another takeover is in progress: wait
        50 ms; a mutex left by a process killed inside its takeover is removed after 10 s)."""
        mutex = self.path + ".takeover"
        try:
            fd = os.open(mutex, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                if time.time() - os.path.getmtime(mutex) > 10.0:
                    os.remove(mutex)
            except OSError:
                pass
            time.sleep(0.05)
            return False
        os.close(fd)
        try:
            now = self._read()
            if now != holder or not self._stale(now):
                return False
            try:
                os.remove(self.path)
            except FileNotFoundError:
                return False
            return True
        finally:
            try:
                os.remove(mutex)
            except FileNotFoundError:
                pass

    def _read(self) -> dict:
        try:
            with open(self.path) as f:
                out = json.load(f)
            return out if isinstance(out, dict) else {}
        except (OSError, ValueError):
            return {}

    def _stale(self, holder: dict) -> bool:
        pid = holder.get("pid")
        if not isinstance(pid, int):
            # unreadable lock: stale only if old (a writer may be between create and write)
            try:
                return time.time() - os.path.getmtime(self.path) > 10.0
            except OSError:
                return True
        if holder.get("host") != socket.gethostname():
            # its process cannot be checked from here: stale once its heartbeat stopped (a lock
            # of an older layerlab, which does not refresh it, never is)
            if "heartbeat" not in holder:
                return False
            age = self._age()
            return age is None or age > float(LOCK_FOREIGN_STALE_S)
        if not _alive(pid):
            return True
        start = holder.get("start")
        return start is not None and _proc_start(pid) not in (None, start)  # pid reused

    def release(self) -> None:
        if not self.held:
            return
        self._stop_heartbeat()
        self.held = False
        holder = self._read()
        if holder.get("pid") == os.getpid() and holder.get("token", self._token) == self._token:
            try:
                os.remove(self.path)
            except FileNotFoundError:
                pass


# --------------------------------------------------------------------------- checkpointer


def discard_checkpoints_after(directory: str | os.PathLike, step: int) -> list[int]:
    """Remove the checkpoints a :func:`~layerlab.loop.fit` run saved after update ``step``.

    ``fit`` saves a step *before* it calls ``callback`` for it, so files a callback writes (per
    epoch probes, curves) can lag the newest checkpoint by one interval when a run is stopped
    inside the callback.  Discarding the checkpoints past the callback's last step makes the
    next ``fit`` call resume at the newest checkpoint at or before ``step`` (its history is
    cut back there on resume) and call back again for the steps after it.  Refuses a directory
    a live run holds (:class:`CheckpointLockedError`).

    Args:
      directory: the run's ``checkpoint_dir``; a missing one is left alone.
      step: the last update whose checkpoint is kept.

    Returns:
      The removed step numbers, ascending.
    """
    import shutil

    step = check_int(step, "step", fn="discard_checkpoints_after", min_value=0)
    path = checkpoint_path(directory, "discard_checkpoints_after", "directory")
    if not os.path.isdir(path):
        return []
    if not os.path.isfile(os.path.join(path, HISTORY_NAME)):
        raise ValueError(
            f"discard_checkpoints_after: directory {path!r} is not a fit checkpoint directory "
            f"(no {HISTORY_NAME}); pass the checkpoint_dir one fit call wrote, not a folder "
            "above it.")
    lock = _Lock(path)
    lock.acquire()  # raises while another live process writes here
    try:
        gone = sorted(int(p) for p in os.listdir(path)
                      if p.isdigit() and os.path.isdir(os.path.join(path, p)) and int(p) > step)
        for s in gone:
            shutil.rmtree(os.path.join(path, str(s)))
        return gone
    finally:
        lock.release()


def checkpoint_path(directory: str | os.PathLike, fn: str = "fit",
                    name: str = "checkpoint_dir") -> str:
    """The absolute path ``directory`` names (``~`` expanded), checked without touching the
    file system: a ``str`` or ``os.PathLike`` of one, not empty."""
    try:
        path = os.fspath(directory)
    except TypeError:
        path = None
    if not isinstance(path, str):  # (a bytes path created the folder, then failed unnamed)
        raise TypeError(
            f"{fn}: {name} must be a path (str or os.PathLike of a str), got "
            f"{type(directory).__name__}"
            + (" (decode it first: os.fsdecode(path))" if isinstance(path, bytes) else "") + "."
        )
    if not path.strip():
        raise ValueError(f"{fn}: {name} is empty ({directory!r}); give a directory path (\".\" "
                         "for the current one).")
    return os.path.abspath(os.path.expanduser(path))


def validate_directory(directory: str | os.PathLike) -> str:
    """Absolute path of a usable checkpoint directory (created if absent); clear error if not."""
    path = checkpoint_path(directory)
    if os.path.exists(path) and not os.path.isdir(path):
        raise NotADirectoryError(
            f"fit: checkpoint_dir {path} exists and is not a directory; pass a directory path "
            "(it is created if missing)."
        )
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise type(e)(
            e.errno, f"fit: cannot create checkpoint_dir {path}: {e.strerror}"
        ) from e
    if not os.access(path, os.W_OK | os.X_OK):
        raise PermissionError(f"fit: checkpoint_dir {path} is not writable.")
    return path


class Checkpointer:
    """``ocp.CheckpointManager`` with two items per step, a lock and an appended history.

    * ``"arrays"``: ``StandardSave`` of ``{"state": state, "best": best_state_or_None}``
      (optax states and typed PRNG keys round-trip);
    * ``"meta"``: ``JsonSave`` of the step, the fit key, the early-stopping bookkeeping, the
      number of history rows and the run fingerprint.
    """

    def __init__(self, directory: str | os.PathLike, *, max_to_keep: int | None = 2,
                 writer: bool = True):
        import orbax.checkpoint as ocp

        self._ocp = ocp
        self.directory = validate_directory(directory)
        self.writer = writer
        self._lock = _Lock(self.directory)
        if writer:
            self._lock.acquire()
        try:
            self.manager = ocp.CheckpointManager(
                self.directory,
                options=ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True),
            )
        except BaseException:
            self._lock.release()
            raise
        self._history_path = os.path.join(self.directory, HISTORY_NAME)
        self._unrestorable: set[int] = set()

    # ------------------------------------------------------------------ steps
    def steps(self) -> list[int]:
        """Step numbers present on disk, newest first."""
        return sorted((int(s) for s in self.manager.all_steps()), reverse=True)

    def latest_step(self) -> int | None:
        return self.manager.latest_step()

    def read_meta(self, step: int) -> dict:
        ocp = self._ocp
        out = self.manager.restore(int(step), args=ocp.args.Composite(meta=ocp.args.JsonRestore()))
        meta = out["meta"]
        if not isinstance(meta, dict) or "step" not in meta:
            raise ValueError(f"meta of step {step} has no 'step' entry")
        if int(meta["step"]) != int(step):
            raise ValueError(f"meta of step {step} says step {meta['step']}")
        return meta

    def restore_arrays(self, step: int, arrays_like: dict[str, Any]) -> dict[str, Any]:
        ocp = self._ocp
        handling = sys.exc_info()[1]  # the caller's exception, if called inside an except
        try:
            out = self.manager.restore(
                int(step),
                args=ocp.args.Composite(
                    arrays=ocp.args.StandardRestore(_abstract(arrays_like))),
            )
        except Exception as e:
            failed = _clear_frames(e, keep=handling)
        else:
            return out["arrays"]
        # a failed orbax/tensorstore restore (corrupt array files) abandons coroutines; their
        # "never awaited" RuntimeWarning would surface at some later, random garbage collection
        # in the user's program.  Collect them now and drop those warnings; any other warning
        # raised meanwhile is passed on unchanged.
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            gc.collect()
        try:  # a warning turned into an error by the user's filters must not hide `failed`
            for w in caught:
                if not _orbax_unawaited(w):
                    warnings.warn_explicit(w.message, w.category, w.filename, w.lineno,
                                           source=w.source)
        finally:
            raise failed

    def restore(self, step: int, arrays_like: dict[str, Any]) -> tuple[dict[str, Any], dict]:
        return self.restore_arrays(step, arrays_like), self.read_meta(step)

    # ------------------------------------------------------------------ history file
    def read_history_lines(self, path: str | None = None) -> list[dict]:
        """Parsed lines of ``history.jsonl`` (or of ``path``, a kept copy; a torn last line
        is ignored)."""
        path = self._history_path if path is None else path
        if not os.path.exists(path):
            return []
        out = []
        with open(path) as f:
            lines = f.read().split("\n")
        for i, line in enumerate(lines):
            if not line.strip():
                continue
            try:
                out.append(json.loads(line))
            except ValueError:
                if i < len(lines) - 2:  # not the last (possibly torn) line
                    raise ValueError(f"{path}: line {i + 1} is not valid JSON") from None
        return out

    def kept_histories(self) -> list[str]:
        """Paths of the kept copies of ``history.jsonl``, newest first."""
        names = [n for n in os.listdir(self.directory)
                 if n.startswith(KEPT_HISTORY) and n[len(KEPT_HISTORY):].isdigit()]
        names.sort(key=lambda n: int(n[len(KEPT_HISTORY):]), reverse=True)
        return [os.path.join(self.directory, n) for n in names]

    def keep_history(self) -> str | None:
        """Copy ``history.jsonl`` to ``history.jsonl.kept-<time_ns>`` (written to a temporary
        name, fsynced, renamed; the file itself renamed when it cannot be read) before a
        resume drops rows of it; the copy's path (``None`` for a process that does not write
        or when there is no history.jsonl)."""
        if not self.writer or not os.path.exists(self._history_path):
            return None
        import shutil

        dst = os.path.join(self.directory, f"{KEPT_HISTORY}{time.time_ns()}")
        tmp = dst + ".tmp"
        try:
            shutil.copyfile(self._history_path, tmp)
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
        except OSError:  # not readable: renamed aside instead (rewrite_history makes a new one)
            with contextlib.suppress(OSError):
                os.remove(tmp)
            os.replace(self._history_path, dst)
            return dst
        os.replace(tmp, dst)
        return dst

    def rewrite_history(self, records: list[dict]) -> None:
        if not self.writer:
            return
        tmp = self._history_path + ".tmp"
        with open(tmp, "w") as f:
            for r in records:
                f.write(json.dumps(_to_py(r), allow_nan=False) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._history_path)

    def append_history(self, records: list[dict]) -> None:
        """Append records (one JSON line each) and fsync: O(new rows), not O(history)."""
        if not self.writer or not records:
            return
        self._check_lock()
        with open(self._history_path, "a") as f:
            for r in records:
                f.write(json.dumps(_to_py(r), allow_nan=False) + "\n")
            f.flush()
            os.fsync(f.fileno())

    # ------------------------------------------------------------------ save
    def mark_unrestorable(self, step: int) -> None:
        self._unrestorable.add(int(step))

    def _check_lock(self) -> None:
        if self._lock.lost:
            raise CheckpointLockedError(
                f"fit: the lock {self._lock.path} was taken over by another process while this "
                "run held it (judged stale: this process was suspended or its file system away "
                f"for over {LOCK_FOREIGN_STALE_S:.0f} s); stopping before a second writer "
                "corrupts the directory. Its last checkpoint is kept.")

    def save(self, step: int, arrays: dict[str, Any], meta: dict[str, Any]) -> None:
        self._check_lock()
        ocp = self._ocp
        step = int(step)
        if step in self._unrestorable:
            # the run reached a step whose old directory did not restore: move it aside
            # (kept for inspection, never deleted) so the new one can be written
            self.manager.wait_until_finished()
            old = os.path.join(self.directory, str(step))
            if os.path.exists(old) and jax.process_index() == 0:
                aside = f"{old}.unrestorable-{int(time.time())}"
                os.replace(old, aside)
                warnings.warn(
                    f"fit: moved the unrestorable checkpoint step {step} to {aside} to write "
                    "the new one.", CheckpointFallbackWarning, stacklevel=3,
                )
            self._unrestorable.discard(step)
            self.manager.reload()
        self.manager.save(
            step,
            args=ocp.args.Composite(
                arrays=ocp.args.StandardSave(arrays), meta=ocp.args.JsonSave(meta)
            ),
            force=True,
        )

    def wait(self) -> None:
        self.manager.wait_until_finished()

    def close(self) -> None:
        try:
            self.manager.wait_until_finished()
            self.manager.close()
        finally:
            self._lock.release()


# --------------------------------------------------------------------------- resume


class CheckpointCorruptError(RuntimeError):
    """No checkpoint step in the directory restores."""


def _history_upto(records: list[dict], t: int) -> tuple[list[dict], dict | None]:
    """Records covering exactly train steps ``0..t-1`` and evaluations at steps ``<= t``."""
    kept: list[dict] = []
    steps: list[int] = []
    for r in records:
        kind = r.get("kind")
        if kind == "train":
            s = [int(v) for v in r["step"]]
            keep = [i for i, v in enumerate(s) if v < t]
            if not keep:
                continue
            if len(keep) < len(s):
                r = {**r, "step": [s[i] for i in keep],
                     "metrics": {k: [v[i] for i in keep] for k, v in r["metrics"].items()}}
            steps.extend(s[i] for i in keep)
            kept.append(r)
        elif kind == "eval":
            s = [int(v) for v in r["step"]]
            keep = [i for i, v in enumerate(s) if v <= t]
            if len(keep) == len(s):
                kept.append(r)
            elif keep:
                kept.append({**r, "step": [s[i] for i in keep],
                             "metrics": {k: [v[i] for i in keep]
                                         for k, v in r["metrics"].items()}})
        else:
            raise ValueError(f"history record of unknown kind {kind!r}")
    if steps != list(range(t)):
        missing = sorted(set(range(t)) - set(steps))[:5]
        raise ValueError(
            f"{HISTORY_NAME} does not cover steps 0..{t - 1} exactly (missing e.g. {missing}, "
            f"{len(steps)} rows)"
        )
    return kept, None


def resume(ckpt: Checkpointer, fingerprint: dict, arrays_like: dict[str, Any]):
    """Restore the newest step that restores; ``None`` when the directory has no step.

    Returns ``(step, arrays, meta, history_records)``.  Steps newer than the one restored
    that failed are reported in one :class:`CheckpointFallbackWarning` and remembered (moved
    aside, not deleted, when the run reaches them again).  A readable step with another
    fingerprint raises :class:`CheckpointMismatchError`; when no step restores,
    :class:`CheckpointCorruptError` lists why each failed.
    """
    failures: list[tuple[int, str]] = []
    steps = ckpt.steps()
    if not steps:
        return None
    try:
        all_records = ckpt.read_history_lines()
        records_error = None
    except (OSError, ValueError) as e:
        all_records, records_error = None, f"{type(e).__name__}: {e}"
    kept: list[tuple[str, list[dict] | None]] | None = None  # read when first needed

    def rows_for(s: int) -> tuple[list[dict], str | None]:
        """The rows of step ``s`` from history.jsonl, else from the newest kept copy holding
        them (with its path)."""
        nonlocal kept
        try:
            if all_records is None:
                raise ValueError(records_error)
            return _history_upto(all_records, s)[0], None
        except ValueError as e:
            first = e
        if kept is None:
            kept = []
            for path in ckpt.kept_histories():
                try:
                    kept.append((path, ckpt.read_history_lines(path)))
                except (OSError, ValueError):
                    continue
        for path, recs in kept:
            try:
                return _history_upto(recs, s)[0], path
            except ValueError:
                continue
        raise first

    for s in steps:
        try:
            meta = ckpt.read_meta(s)
        except Exception as e:  # orbax raises many kinds (JSONDecodeError, KeyError, OSError)
            failures.append((s, f"metadata unreadable ({type(e).__name__}: {_short(str(e), 160)})"))
            continue
        saved = meta.get("fingerprint")
        saved = saved if isinstance(saved, dict) else {}
        now = fingerprint
        if "version" not in saved and saved:  # written before fingerprint version 2:
            now = {k: v for k, v in fingerprint.items() if k in saved}  # compare what it has
        elif saved.get("version") == 2:  # version 3 lists dataclass fields of the step's
            # closure and hashes a Partial step's bound arrays: a version-2 step entry cannot
            # be compared, everything else can
            skip = ("version", "step", "step_bound_hash", *_ADDED_KEYS)
            saved = {k: v for k, v in saved.items() if k not in skip}
            now = {k: v for k, v in fingerprint.items() if k not in skip}
            warnings.warn(
                f"fit: {ckpt.directory} was written by an older layerlab (fingerprint version "
                "2): the step's settings cannot be compared with this run's and are assumed "
                "equal; data, initial state, key and lengths are checked.",
                UserWarning, stacklevel=4)
        soft: list[str] = []
        unchecked: list[str] = []
        diff = fingerprint_diff(saved, now, soft, unchecked)
        if unchecked and not diff:
            objs = [k for k in unchecked if k in _OBJECT_KEYS]
            vals = [k for k in unchecked if k in _VALUE_KEYS]
            what = []
            if objs:
                what.append("the methods and attributes of the user's own objects that the "
                            f"step or eval_fn reaches ({', '.join(objs)}: a flax module or "
                            "dataclass of the user's code, a callable object, obj of obj.step)")
            if vals:
                what.append("the dtypes, complex numbers, bytes, slices, ranges and sets "
                            f"that the step or eval_fn reaches ({', '.join(vals)})")
            warnings.warn(
                f"fit: {ckpt.directory} was written by an older layerlab, which did not "
                f"fingerprint {' nor '.join(what)}: they cannot be "
                "compared with this run's and are assumed equal; everything else is checked.",
                UserWarning, stacklevel=4)
        if soft and not diff:
            warnings.warn(
                f"fit: resuming {ckpt.directory} although settings read through helper "
                "modules, module or namespace attributes or long containers differ from the "
                "saved run's (these can be trace-time caches, which differ between processes "
                "of one script, so they warn rather than refuse; if a setting changed, use a "
                "new checkpoint_dir):\n  " + "\n  ".join(soft), RuntimeWarning, stacklevel=4)
        if diff:
            raise CheckpointMismatchError(
                f"fit: {ckpt.directory} holds a checkpoint of a different run (step {s}); "
                "saved vs now:\n  " + "\n  ".join(diff)
                + "\nResume with the same arguments, data and initial state, or use a new "
                "checkpoint_dir."
            )
        try:
            source = None
            if "history" in meta:  # format of layerlab <= 0.1: the whole history in the meta
                records = None
            else:
                records, source = rows_for(s)
        except Exception as e:
            failures.append((s, f"history rows missing ({_short(str(e), 160)})"))
            continue
        try:
            arrays = ckpt.restore_arrays(s, arrays_like)
            want = meta.get("state_hash")
            if want is not None and not str(want).startswith("unhashed"):
                got = content_hash(arrays)
                if got != want:
                    raise ValueError(f"content hash {got} differs from the saved {want}")
        except Exception as e:
            failures.append((s, f"arrays do not restore ({type(e).__name__}: "
                                f"{_short(str(e), 160)})"))
            continue
        # the caller rewrites history.jsonl with `records`: keep a copy first when that drops
        # rows of it (a fallback past newer steps, or rows taken from a kept copy), so a
        # skipped step that restores later still has its rows
        # (history.jsonl unreadable, ``all_records`` None: it may hold rows of newer steps
        # that no kept copy has, so it is always kept)
        copy = None
        if failures or source is not None:
            if all_records is None:
                copy = ckpt.keep_history()
            elif records is not None:
                now = {json.dumps(r, sort_keys=True) for r in records}
                if any(json.dumps(r, sort_keys=True) not in now for r in all_records):
                    copy = ckpt.keep_history()
        if failures:
            where = (f"copied to {os.path.basename(copy)} before {HISTORY_NAME} is rewritten"
                     if copy is not None else
                     f"kept in a copy {KEPT_HISTORY}<time> (by process 0)"
                     if not ckpt.writer else
                     f"not kept ({HISTORY_NAME} holds none past step {s}, so rewriting it "
                     "drops nothing)")
            warnings.warn(
                f"fit: checkpoint step(s) {[f for f, _ in failures]} in {ckpt.directory} do not "
                f"restore ({'; '.join(f'step {f}: {why}' for f, why in failures)}); resuming "
                f"from step {s} instead. Nothing was deleted: the skipped step directories "
                "stay (moved aside to <step>.unrestorable-<time> when this run reaches them "
                f"again) and the history rows past step {s} are {where}, so a skipped step "
                "that restores later still resumes.",
                CheckpointFallbackWarning, stacklevel=3,
            )
            for f, _ in failures:
                ckpt.mark_unrestorable(f)
        elif all_records is None and source is not None:
            warnings.warn(
                f"fit: {ckpt.directory}/{HISTORY_NAME} is unreadable ({records_error}); "
                f"resuming from step {s} with the history rows of "
                f"{os.path.basename(source)}. " + (
                    f"{HISTORY_NAME} was copied to {os.path.basename(copy)} before being "
                    "rewritten." if copy is not None else
                    f"Process 0 keeps {HISTORY_NAME} in a copy {KEPT_HISTORY}<time>."),
                CheckpointFallbackWarning, stacklevel=3,
            )
        return s, arrays, meta, records
    raise CheckpointCorruptError(
        f"fit: no checkpoint in {ckpt.directory} restores: "
        + "; ".join(f"step {f}: {why}" for f, why in failures)
        + ". Move the directory (or the bad step directories) away to start afresh."
    )


def open_checkpoint(directory, max_to_keep, fingerprint: dict, arrays_like: dict[str, Any]):
    """Validate and lock ``directory``, then :func:`resume` from it.

    Returns ``(checkpointer, found)`` with ``found`` as returned by :func:`resume` (``None``
    for a fresh directory); the lock is released again when resuming raises.
    """
    ckpt = Checkpointer(directory, max_to_keep=max_to_keep, writer=jax.process_index() == 0)
    try:
        return ckpt, resume(ckpt, fingerprint, arrays_like)
    except BaseException:
        ckpt.close()
        raise


def checkpoint_meta(step: int, fingerprint: dict, history_rows: int, arrays: dict[str, Any],
                    stopped: bool, early_stopping: dict | None) -> dict[str, Any]:
    """The JSON meta saved beside the arrays of one step (small: no history)."""
    return {
        "step": int(step),
        "fingerprint": fingerprint,
        "history_rows": int(history_rows),
        "state_hash": content_hash(arrays),
        "stopped": bool(stopped),
        "early_stopping": early_stopping,
    }
