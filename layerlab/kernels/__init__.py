"""Kernels of wide networks: native closed forms, empirical NTK, and neural-tangents.

Native (no neural-tangents needed):

* :func:`relu_nngp`, :func:`relu_ntk`, :func:`erf_nngp`, :func:`erf_ntk`,
  :func:`fc_kernels` -- infinite-width kernels of fully connected networks,
  gradient-safe (finite derivatives on the diagonal and for nearly parallel inputs);
* :func:`empirical_ntk` -- finite-width NTK :math:`J J^\\top` from VJPs and JVPs.

``empirical_ntk_fn`` and ``empirical_kernel_fn`` are neural-tangents' own, behind a check of
``implementation``: 1 and 2 work on this JAX, ``AUTO`` (0) and 3 are refused with a
``ValueError`` (neural-tangents 0.6.5 fails on them: ``KeyError: 0`` in its FLOP count,
``linearize()``'s ``has_aux``).

neural-tangents 0.6.5, imported through :mod:`layerlab._nt_compat` (aliases for names
JAX moved, TensorFlow-only ``experimental`` subpackage not loaded):

* ``nt`` -- the ``neural_tangents`` module itself;
* ``stax``, ``predict``, ``monte_carlo_kernel_fn``, ``Kernel``, ``batch``.

Never ``import neural_tangents`` directly in layerlab code; import from here.  The
neural-tangents names are loaded lazily, on first access, so importing ``layerlab`` or any
paper package does not import neural-tangents.
"""
from layerlab._nt_compat import import_neural_tangents as _import_nt

from ._closed_form import FCKernel as FCKernel
from ._closed_form import erf_nngp as erf_nngp
from ._closed_form import erf_ntk as erf_ntk
from ._closed_form import fc_kernels as fc_kernels
from ._closed_form import relu_nngp as relu_nngp
from ._closed_form import relu_ntk as relu_ntk
from ._empirical import empirical_kernel_fn as empirical_kernel_fn
from ._empirical import empirical_ntk as empirical_ntk
from ._empirical import empirical_ntk_fn as empirical_ntk_fn

_NT_NAMES = ("stax", "predict", "monte_carlo_kernel_fn", "Kernel", "batch")


def __getattr__(name: str):
    """Import neural-tangents only when one of its names is first asked for (PEP 562)."""
    if name == "nt":
        return _import_nt()
    if name in _NT_NAMES:
        return getattr(_import_nt(), name)
    raise AttributeError(f"module 'layerlab.kernels' has no attribute {name!r}")

__all__ = [
    "FCKernel",
    "Kernel",
    "batch",
    "empirical_kernel_fn",
    "empirical_ntk",
    "empirical_ntk_fn",
    "erf_nngp",
    "erf_ntk",
    "fc_kernels",
    "monte_carlo_kernel_fn",
    "nt",
    "predict",
    "relu_nngp",
    "relu_ntk",
    "stax",
]
