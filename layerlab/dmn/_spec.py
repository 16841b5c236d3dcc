"""DMN architecture strings (the grammar of the paper's tables) and the layers they name.

Dense and convolutional DMN layers have class-PCA filters as weights.

A DMN (density-matrix network) layer replaces a trained layer by the leading eigenvectors
of the class density matrices of its inputs (eqs. 15, 19-24 of Dehmamy, Rohani &
Katsaggelos, arXiv:1703.04757), with zero bias and a ReLU (``DMNConfig(activation=...)``):

.. math::  h^{(k)} = \\mathrm{ReLU}(W^{(k)\\top} h^{(k-1)}),
   \\qquad W^{(k)} = [v_1, \\dots, v_F],\\ \\rho_c v = \\lambda v .

Convolutional DMN layers do the same on ``k x k`` patches (``k*k*C`` dims): the filters
are eigenvectors of the patch density matrices reshaped to ``[k, k, C, F]`` kernels.

Architectures are written as in the paper's tables, comma separated:

* ``d<F>``  convolutional DMN layer with ``F`` filters (3x3 patches by default),
* ``dd<F>`` dense DMN layer on the flattened input,
* ``m``     2x2 max-pooling (stride 2),
* ``c<F>``  trainable (backprop) 3x3 convolution + ReLU (flax ``nn.Conv``),
* ``bn``    trainable batch-norm (flax ``nn.BatchNorm``), per channel,
* ``bnw``   the same per image *column* (statistics over samples, rows and channels for each
  column): what Keras' ``BatchNormalization(axis=-1)`` computes on ``channels_first`` data,
  the data format of the authors' notebook head (an ablation of the paper's BN rows),
* ``de<K>`` trainable dense layer; the last one is the softmax classifier (logits).

DMN layers must come first (a closed-form layer is built on the outputs of the layers below
it, which must already be fixed); the trainable "head" follows and is trained by
``layerlab.loop.fit`` on the frozen DMN features, so the DMN part never enters
back-propagation (eqs. 25-26).
"""
from __future__ import annotations

import numbers
import re
from collections.abc import Iterable, Sequence
from typing import NamedTuple

import numpy as np

_TOKEN = re.compile(r"^(dd|de|d|c)(\d+)$")


class Layer(NamedTuple):
    """One parsed architecture token: ``kind`` in {dmn_conv, dmn_dense, pool, conv, bn,
    bn_col, dense} and ``width`` (filters/units; 0 for pool and batch-norm)."""

    kind: str
    width: int = 0


_KINDS = {"d": "dmn_conv", "dd": "dmn_dense", "c": "conv", "de": "dense"}
_NAMES = {v: k for k, v in _KINDS.items()} | {"pool": "m", "bn": "bn", "bn_col": "bnw"}
_WIDE = ("dmn_conv", "dmn_dense", "conv", "dense")  # kinds with a width (filters/units)
#: kinds that need [N, H, W, C] maps: nothing of these may follow a dense layer (dd, de),
#: whose output is flat [N, F]
_SPATIAL = ("dmn_conv", "pool", "conv", "bn_col")
_FLAT = ("dmn_dense", "dense")


def _token(lay: Layer) -> str:
    return _NAMES[lay.kind] + (str(lay.width) if lay.width else "")


def check_layers(layers: Sequence, spec: object = None, *, fn: str = "parse_spec",
                 head: bool = True) -> tuple[Layer, ...]:
    """Validate parsed layers; return them as ``Layer`` tuples (widths as ``int``).

    One rule set for architecture strings and lists: every entry a ``Layer(kind, width)``
    (or a ``(kind, width)`` / ``(kind,)`` tuple) of a known kind; ``d``/``dd``/``c``/``de``
    widths an integer ``>= 1``, ``m``/``bn``/``bnw`` without a width; no spatial layer
    (``d``, ``m``, ``c``, ``bnw``: they need ``[N, H, W, C]`` maps) after a dense one (``dd``,
    ``de``: flat ``[N, F]`` output); with ``head`` (a whole network) the last layer is the
    classifier ``de<K>``.  ``head=False`` checks a closed-form prefix (``build_dmn``,
    ``dmn_apply``).  Errors name ``fn``, the layer's position and the spec.
    """
    if isinstance(layers, (str, bytes)) or not isinstance(layers, Iterable):
        raise TypeError(f"{fn}: the layers must be a sequence of Layer(kind, width), got "
                        f"{type(layers).__name__} {repr(layers)[:80]}.")
    layers = list(layers)
    shown = repr(spec if spec is not None else layers)
    out = []
    for i, t in enumerate(layers):
        if isinstance(t, (str, bytes)) or not isinstance(t, (tuple, list)) \
                or not 1 <= len(t) <= 2:
            raise TypeError(
                f"{fn}: layer {i} of {shown} must be a Layer(kind, width) or a (kind, width) "
                f"tuple, got {t!r}. Pass the architecture as one string (\"d6,m,de10\") or "
                "as Layer tuples.")
        kind, width = t[0], (t[1] if len(t) == 2 else 0)
        if kind not in _NAMES:
            raise ValueError(f"{fn}: layer {i} of {shown} has unknown kind {kind!r}; known "
                             f"kinds: {tuple(_NAMES)}.")
        if isinstance(width, (bool, np.bool_)) or not isinstance(width, (numbers.Integral,
                                                                        np.integer)):
            raise TypeError(f"{fn}: layer {i} ({kind!r}) of {shown} must have an integer "
                            f"width, got {width!r}.")
        width = int(width)
        if kind in _WIDE and width < 1:
            raise ValueError(f"{fn}: layer {i} ({kind!r}) of {shown} must have width >= 1 "
                             f"(filters or units), got {width}.")
        if kind not in _WIDE and width != 0:
            raise ValueError(f"{fn}: layer {i} ({kind!r}) of {shown} takes no width (it is "
                             f"{_NAMES[kind]!r}), got width {width}.")
        out.append(Layer(kind, width))
    if head and (not out or out[-1].kind != "dense"):
        raise ValueError(f"{fn}: architecture {shown} must end with the classifier "
                         "de<num_classes>.")
    flat = next((i for i, lay in enumerate(out) if lay.kind in _FLAT), None)
    if flat is not None:
        for j in range(flat + 1, len(out)):
            if out[j].kind in _SPATIAL:
                raise ValueError(
                    f"{fn}: layer {j} ({_token(out[j])}) of {shown} needs [N, H, W, C] maps "
                    f"but comes after the dense layer {flat} ({_token(out[flat])}), whose "
                    "output is flat [N, F]; put d/m/c/bnw layers before dd/de layers.")
    return tuple(out)


def parse_spec(spec: str | Sequence[Layer]) -> tuple[Layer, ...]:
    """Parse an architecture string such as ``"d15, m, c80, m, de10"``.

    Strings and lists of ``Layer`` are checked by the same rules (:func:`check_layers`):
    known kinds, widths ``>= 1``, no ``d``/``m``/``c``/``bnw`` after a dense layer
    (``dd``/``de``), the last layer the classifier ``de<K>``.

    Args:
      spec: comma-separated tokens (see the module docstring) or already-parsed layers.

    Returns:
      A tuple of ``Layer``.
    """
    if not isinstance(spec, str):
        return check_layers(spec, fn="parse_spec")
    out = []
    for tok in spec.replace(" ", "").lower().split(","):
        if tok == "m":
            out.append(Layer("pool"))
        elif tok == "bn":
            out.append(Layer("bn"))
        elif tok == "bnw":
            out.append(Layer("bn_col"))
        else:
            m = _TOKEN.match(tok)
            if not m or int(m.group(2)) < 1:
                raise ValueError(
                    f"bad architecture token {tok!r} in {spec!r}: use d<F> (conv DMN), dd<F> "
                    "(dense DMN), m (2x2 max-pool), c<F> (trained conv), bn, bnw, de<K> "
                    "(dense)."
                )
            out.append(Layer(_KINDS[m.group(1)], int(m.group(2))))
    return check_layers(out, spec, fn="parse_spec")


def format_spec(layers: Sequence[Layer]) -> str:
    """Inverse of ``parse_spec``: ``(Layer('dmn_conv', 6), Layer('pool'), ...) -> "d6,m,..."``."""
    return ",".join(_token(lay) for lay in layers)


def convnet_spec(spec: str | Sequence[Layer]) -> tuple[Layer, ...]:
    """The same architecture with every DMN layer replaced by a trainable one (d->c, dd->de)."""
    swap = {"dmn_conv": "conv", "dmn_dense": "dense"}
    return tuple(Layer(swap.get(lay.kind, lay.kind), lay.width) for lay in parse_spec(spec))


def split_spec(layers: Sequence[Layer]) -> tuple[tuple[Layer, ...], tuple[Layer, ...]]:
    """Split into the closed-form DMN prefix (DMN layers and pools) and the trainable head.

    Pools right after the last DMN layer belong to the prefix.
    """
    layers = tuple(layers)
    cut = 0
    for i, lay in enumerate(layers):
        if lay.kind in ("dmn_conv", "dmn_dense"):
            cut = i + 1
    while cut and cut < len(layers) and layers[cut].kind == "pool":  # pools after the last
        cut += 1  # DMN layer are parameter-free: precompute them with the DMN features
    prefix, head = layers[:cut], layers[cut:]
    bad = [lay for lay in prefix if lay.kind in ("conv", "bn", "bn_col", "dense")]
    if bad:
        raise ValueError(
            f"DMN layers must come before trainable layers, got {format_spec(layers)!r}: a "
            "closed-form layer needs fixed inputs. Put d/dd/m tokens first."
        )
    return prefix, head


# ------------------------------------------------------------------------------ apply
