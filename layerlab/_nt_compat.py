"""Import neural-tangents on current JAX without TensorFlow and without touching JAX.

Why this exists
---------------
neural-tangents 0.6.5 (its newest release) does not import on JAX 0.10:

* it imports ``Jaxpr``, ``JaxprEqn``, ``Var``, ``Literal`` and ``Primitive`` from
  ``jax.core``, which now only re-exports a few names (they live in ``jax.extend.core``);
* it imports ``safe_map``/``safe_zip`` from ``jax.util``, a module that no longer exists
  (the functions live in ``jax._src.util``);
* it registers rules for ``jax.interpreters.ad.zeros_like_p``, a primitive JAX removed;
* ``neural_tangents/__init__.py`` imports the ``experimental`` subpackage, whose only
  content (``empirical_ntk_fn_tf``) imports TensorFlow and ``jax2tf``.

What it does
------------
It changes nothing in JAX.  Instead, every ``neural_tangents`` module is executed with
its own ``__builtins__`` whose ``__import__`` hands neural-tangents *shim module
objects* in place of ``jax``, ``jax.core``, ``jax.util``, ``jax.interpreters`` and
``jax.interpreters.ad``.  A shim forwards every attribute to the real module and only
supplies a name the real module lacks (an *alias*, listed in ``ALIASES``):

============================  ===========================================================
name seen by neural-tangents  what it is now
============================  ===========================================================
``jax.core.Jaxpr`` etc.       ``jax.extend.core.Jaxpr`` (``JaxprEqn``, ``Var``,
                              ``Literal``, ``Primitive`` likewise)
``jax.core.get_aval`` etc.    ``jax._src.core`` (used only by ``empirical_ntk_fn``
                              implementation 3, "structured derivatives")
``jax.util.safe_map/zip``     ``jax._src.util.safe_map/safe_zip``
``jax.interpreters.ad.        a private placeholder ``Primitive("zeros_like")``: JAX no
zeros_like_p``                longer emits this primitive, so neural-tangents' rules
                              registered for it are never used
============================  ===========================================================

The ``experimental`` subpackage is replaced (in ``sys.modules``, before the import) by a
placeholder module whose attributes raise an ``AttributeError`` explaining why, so
TensorFlow is never imported -- also when it *is* installed (a plain ``pip install``
of neural-tangents pulls it in).  The import hook is a ``sys.meta_path`` finder that
acts only on modules named ``neural_tangents`` / ``neural_tangents.*``.

Stepping aside
--------------
``import_neural_tangents()`` uses the layer only when it is needed:

1. if ``neural_tangents`` is already imported and complete, it is returned as is;
2. the environment variable ``LAYERLAB_NT_COMPAT`` may force ``"on"`` or ``"off"``
   (``"off"``: plain ``import neural_tangents``, errors propagate);
3. otherwise (``"auto"``) versions up to ``LAST_KNOWN_BROKEN`` (0.6.5) go through the
   layer straight away: a plain import of them would load TensorFlow, when installed,
   only to fail on ``jax.core``.  A newer release is first imported plainly; only if
   that raises ``ImportError``/``AttributeError`` is the partial import discarded and
   the layer used.  Each shim also defers to the real module for every name it has, so
   once JAX or neural-tangents agree again the aliases are simply never consulted.
"""
from __future__ import annotations

import builtins
import importlib
import importlib.abc
import importlib.machinery
import importlib.metadata
import os
import re
import sys
import types
from typing import Any

LAST_KNOWN_BROKEN = (0, 6, 5)
ENV_VAR = "LAYERLAB_NT_COMPAT"

# shim name -> {missing attribute: (module holding it now, attribute name)}
ALIASES: dict[str, dict[str, tuple[str, str]]] = {
    "jax.core": {
        "Jaxpr": ("jax.extend.core", "Jaxpr"),
        "JaxprEqn": ("jax.extend.core", "JaxprEqn"),
        "Var": ("jax.extend.core", "Var"),
        "Literal": ("jax.extend.core", "Literal"),
        "Primitive": ("jax.extend.core", "Primitive"),
        "get_aval": ("jax._src.core", "get_aval"),
        "lattice_join": ("jax._src.core", "lattice_join"),
        "DShapedArray": ("jax._src.core", "DShapedArray"),
    },
    "jax.util": {
        "safe_map": ("jax._src.util", "safe_map"),
        "safe_zip": ("jax._src.util", "safe_zip"),
    },
    "jax.interpreters.ad": {
        "zeros_like_p": ("layerlab._nt_compat", "_ZEROS_LIKE_P"),
    },
}

_TF_FREE_DOC = (
    "layerlab placeholder for neural_tangents.experimental: the real module only holds the "
    "TensorFlow port `empirical_ntk_fn_tf` and imports TensorFlow, so layerlab does not load "
    "it (see layerlab/_nt_compat.py). Use layerlab.kernels.empirical_ntk_fn instead."
)


def _make_zeros_like_p():
    from jax.extend.core import Primitive

    return Primitive("layerlab_nt_compat_zeros_like")


_ZEROS_LIKE_P = None  # created lazily in _install (needs jax)


class _Shim(types.ModuleType):
    """A module object that forwards to ``real`` and only fills in missing names."""

    def __init__(self, name: str, real: types.ModuleType | None, overrides: dict[str, Any]):
        super().__init__(name, f"neural-tangents' view of {name} (layerlab._nt_compat)")
        object.__setattr__(self, "_real", real)
        object.__setattr__(self, "_overrides", overrides)  # shim submodules
        object.__setattr__(self, "_aliases", ALIASES.get(name, {}))

    def __getattr__(self, attr: str):
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        overrides = object.__getattribute__(self, "_overrides")
        if attr in overrides:
            return overrides[attr]
        real = object.__getattribute__(self, "_real")
        if real is not None:
            try:
                return getattr(real, attr)
            except AttributeError:
                pass
        aliases = object.__getattribute__(self, "_aliases")
        if attr in aliases:
            mod, name = aliases[attr]
            return getattr(importlib.import_module(mod), name)
        raise AttributeError(f"module {self.__name__!r} (as seen by neural-tangents) has no "
                             f"attribute {attr!r}")


class _Layer:
    """The shim modules and the ``__builtins__`` that neural-tangents modules run with."""

    def __init__(self):
        import jax
        import jax.interpreters
        import jax.interpreters.ad

        try:
            real_util = importlib.import_module("jax.util")
        except ImportError:
            real_util = None
        core = _Shim("jax.core", importlib.import_module("jax.core"), {})
        util = _Shim("jax.util", real_util, {})
        ad = _Shim("jax.interpreters.ad", jax.interpreters.ad, {})
        interpreters = _Shim("jax.interpreters", jax.interpreters, {"ad": ad})
        self.jax = _Shim("jax", jax, {"core": core, "util": util, "interpreters": interpreters})
        self.redirect = {"jax": self.jax, "jax.core": core, "jax.util": util,
                         "jax.interpreters": interpreters, "jax.interpreters.ad": ad}
        self.builtins = dict(vars(builtins))
        self.builtins["__import__"] = self._import

    def _import(self, name, globals=None, locals=None, fromlist=(), level=0):
        if level != 0 or not (name == "jax" or name.startswith("jax.")):
            return builtins.__import__(name, globals, locals, fromlist, level)
        try:
            real = builtins.__import__(name, globals, locals, fromlist, level)
        except ModuleNotFoundError:
            if name not in self.redirect:  # e.g. jax.util, which JAX removed
                raise
            real = None
        if fromlist:  # `from jax.core import X` / `from jax import core`
            return self.redirect.get(name, real)
        return self.jax  # `import jax` / `import jax.numpy as jnp` bind the top package


class _Loader(importlib.abc.Loader):
    def __init__(self, inner, layer: _Layer):
        self._inner = inner
        self._layer = layer

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module):
        module.__dict__["__builtins__"] = self._layer.builtins
        self._inner.exec_module(module)

    def __getattr__(self, attr):  # get_source, get_filename, resource readers, ...
        return getattr(self._inner, attr)


class _Finder(importlib.abc.MetaPathFinder):
    """Gives ``neural_tangents`` modules (and only them) the compat ``__builtins__``."""

    def __init__(self, layer: _Layer):
        self.layer = layer

    def find_spec(self, fullname, path, target=None):
        if fullname != "neural_tangents" and not fullname.startswith("neural_tangents."):
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _Loader(spec.loader, self.layer)
        return spec


def _version_tuple(v: str) -> tuple[int, ...]:
    """Release numbers of a version string: the leading digits of each of its first three
    dot-separated parts (``"0.6.5rc1"`` -> ``(0, 6, 5)``, not ``(0, 6, 51)``; a part without
    leading digits counts as 0).  A pre-release ranks with its release (``packaging`` is no
    dependency of layerlab)."""
    out = []
    for part in v.strip().split(".")[:3]:
        m = re.match(r"\d+", part)
        out.append(int(m.group()) if m else 0)
    return tuple(out)


def needs_layer(version: str) -> bool:
    """Whether a neural-tangents ``version`` is known to need the layer (<= 0.6.5)."""
    return _version_tuple(version) <= LAST_KNOWN_BROKEN


def _purge():
    for name in [m for m in sys.modules if m == "neural_tangents" or
                 m.startswith("neural_tangents.")]:
        del sys.modules[name]


def _install() -> types.ModuleType:
    global _ZEROS_LIKE_P
    _purge()  # drop leftovers of an earlier failed plain import
    if _ZEROS_LIKE_P is None:
        _ZEROS_LIKE_P = _make_zeros_like_p()
    finder = next((f for f in sys.meta_path if isinstance(f, _Finder)), None)
    if finder is None:
        finder = _Finder(_Layer())
        sys.meta_path.insert(0, finder)
    stub = types.ModuleType("neural_tangents.experimental", _TF_FREE_DOC)

    def __getattr__(attr):
        raise AttributeError(f"neural_tangents.experimental.{attr} is not available: "
                             + _TF_FREE_DOC)

    stub.__getattr__ = __getattr__
    stub.__layerlab_placeholder__ = True
    sys.modules["neural_tangents.experimental"] = stub
    try:
        return importlib.import_module("neural_tangents")
    except BaseException:
        _purge()
        raise


def import_neural_tangents(mode: str | None = None) -> types.ModuleType:
    """Return the ``neural_tangents`` module, importing it through the layer if needed.

    Args:
      mode: ``"auto"`` (default; see the module docstring), ``"on"`` (always use the
        layer) or ``"off"`` (plain import).  Defaults to ``$LAYERLAB_NT_COMPAT`` or
        ``"auto"``.

    Returns:
      The imported ``neural_tangents`` package.
    """
    mode = (mode or os.environ.get(ENV_VAR, "auto")).lower()
    if mode not in ("auto", "on", "off"):
        raise ValueError(f"{ENV_VAR} must be 'auto', 'on' or 'off', got {mode!r}")
    loaded = sys.modules.get("neural_tangents")
    if loaded is not None and hasattr(loaded, "stax") and hasattr(loaded, "empirical_ntk_fn"):
        return loaded
    if mode == "on":
        return _install()
    if mode == "off":
        return importlib.import_module("neural_tangents")
    try:
        version = importlib.metadata.version("neural-tangents")
    except importlib.metadata.PackageNotFoundError as e:
        raise ImportError("neural-tangents is not installed: `uv sync` (or "
                          "`pip install neural-tangents`) installs it") from e
    if needs_layer(version):
        return _install()
    try:
        return importlib.import_module("neural_tangents")
    except (ImportError, AttributeError):
        _purge()
        return _install()
