"""Adapters: any JAX model as an :class:`Inspectable` (per-layer representations and more).

The core of :mod:`layerlab.inspect` needs only ``features(params, x) -> {name: [n, ...]}``,
the per-layer representations of a batch ``x [n, ...]``.  An :class:`Inspectable` bundles it
with what some diagnostics need in addition: the model's outputs (empirical NTK), its named
weight kernels (weight spectra) and, for MLPs, the prior variances of the layers above each
representation (DGL under the NNGP of the remaining layers).  Adapters build it for

* flax linen (:func:`from_linen`: outputs of ``nn.Dense``/``nn.Conv`` through
  ``capture_intermediates`` and every value ``sow``-n into ``"intermediates"``);
* flax NNX (:func:`from_nnx`: ``nnx.capture`` of ``nnx.Intermediate`` -- sown values and the
  outputs of ``nnx.Linear``/``nnx.Conv`` sub-modules);
* plain ``(params, x)`` functions composed of layers (:func:`from_layers`) or any
  ``features`` function (:func:`from_features`);
* the toolkit's own nets: ``layerlab.nets`` MLPs (:func:`from_mlp`) and the reversible MLP of
  ``layerlab.gnrev`` (:func:`from_revmlp`).

Representation names are ``/``-joined module paths (``"Conv_0"``, ``"block/Dense_1"``);
weight names are the ``/``-joined parameter paths (``"Conv_0/kernel"``).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from layerlab.dgl import LayerVariances, mf_variances

if TYPE_CHECKING:  # annotations only: flax and layerlab.gnrev are imported where they are used
    import flax.linen as nn
    from flax import nnx

    from layerlab.gnrev import RevMLPFrozen

__all__ = [
    "Inspectable",
    "from_features",
    "from_layers",
    "from_linen",
    "from_nnx",
    "from_mlp",
    "from_revmlp",
    "named_weights",
]

FeaturesFn = Callable[[Any, jax.Array], Mapping[str, jax.Array]]


class Inspectable(NamedTuple):
    """A model seen layer by layer.

    Attributes:
      features: ``features(params, x [n, ...]) -> {name: [n, ...]}``, the per-layer
        representations of the batch (samples as rows; insertion order = layer order).
      apply: ``apply(params, x) -> [n, k]`` model outputs, or ``None`` (no NTK diagnostics).
      weights: ``weights(params) -> {name: array}`` weight kernels whose spectra are reported,
        as ``[fan_in, fan_out]`` matrices; a kernel of rank > 2 is read as
        ``[prod(shape[:-1]), shape[-1]]`` (a convolution's ``[kh, kw, c_in, c_out]``).
        Default: :func:`named_weights` (parameter leaves with ``ndim >= 2``, not ``bias``),
        each kernel of rank > 2 split into inputs and outputs by the shape of its sibling
        ``bias`` where there is one (``[d, heads, head_dim]`` with a ``[heads, head_dim]``
        bias as ``[d, heads head_dim]``), and a kernel whose bias has its leading axes
        (``[L, d_in, d_out]`` with an ``[L, d_out]`` bias: stacked layers) split into
        ``<name>/0 ..``.  A list of kernels under one name is reported as ``<name>/i``.  (A
        stacked ``[L, d_in, d_out]`` kernel *without* a bias cannot be told from a 1-D
        convolution's ``[k, c_in, c_out]`` and is read as the latter, one ``[L d_in, d_out]``
        matrix: pass ``weights=`` returning ``{name: list(kernel)}`` to split it.)  The
        linen and NNX adapters set it: the trainable parameters only, split by the modules'
        own output shapes.
      top_variances: ``top_variances(params) -> {layer name: LayerVariances}``, the fan-in
        variances ``[D + 1]`` of the network above each representation (mean-field, Sec. V of
        Ben-David & Ringel 2019), or ``None``; layers without an entry use the configured
        default ReLU top network (:class:`layerlab.inspect.TopNetwork`).
      trainable: ``trainable(params) -> (theta, rebuild)``, the part of ``params`` the NTK
        differentiates (``theta``) and ``rebuild(theta) -> params``, or ``None`` (all of
        ``params``).  The linen and NNX adapters set it so that BatchNorm statistics, RNG
        counters and other non-trainable state are held fixed, not differentiated.
      channels_last: ``True`` when the representations with spatial axes are known to be
        channels-last (the linen and NNX adapters: flax's layout; ``InspectConfig.channel_axis``
        is then ignored); ``None`` or ``False`` (plain JAX: unknown) reads them as
        ``InspectConfig.channel_axis`` says and warns about a 4-D representation that looks
        channels-first under ``channel_axis = -1``.
    """

    features: FeaturesFn
    apply: Callable[[Any, jax.Array], jax.Array] | None = None
    weights: Callable[[Any], Mapping[str, jax.Array]] | None = None
    top_variances: Callable[[Any], Mapping[str, LayerVariances]] | None = None
    trainable: Callable[[Any], tuple[Any, Callable[[Any], Any]]] | None = None
    channels_last: bool | None = None


# ----------------------------------------------------------------------------- paths
def _key_name(k) -> str | None:
    if isinstance(k, jax.tree_util.DictKey):
        return str(k.key)
    if isinstance(k, jax.tree_util.GetAttrKey):
        return None if k.name == "value" else k.name  # nnx.Variable(...).value
    if isinstance(k, jax.tree_util.SequenceKey):
        return str(k.idx)
    return str(getattr(k, "key", k))


def _path_name(path, drop: Sequence[str] = ()) -> str:
    parts = [p for p in (_key_name(k) for k in path) if p is not None and p not in drop]
    return "/".join(parts)


def _named_leaves(params: Any) -> dict[str, jax.Array]:
    """Every leaf by its ``/``-joined path; of a linen variables dict (a mapping with a
    ``"params"`` entry) only the ``"params"`` collection, named without ``"params/"``."""
    # a linen variables dict; not an nnx.State (whose keys are attribute names)
    if (isinstance(params, Mapping) and "params" in params
            and not type(params).__module__.startswith("flax.nnx")):
        params = params["params"]
    return {_path_name(path): leaf for path, leaf in jax.tree_util.tree_leaves_with_path(params)}


def named_weights(params: Any, *, min_ndim: int = 2) -> dict[str, jax.Array]:
    """Every weight kernel: parameter leaves with ``ndim >= min_ndim``, not named ``bias``.

    Named by the ``/``-joined path.  Of a flax linen variables dict (a mapping with a
    ``"params"`` entry) only the ``"params"`` collection is read and its name dropped: a linen
    ``{"params": {"Conv_0": {"kernel": ...}}, "batch_stats": ...}`` gives ``{"Conv_0/kernel":
    [kh, kw, c_in, c_out]}`` (BatchNorm statistics, SpectralNorm's ``u`` and other
    collections are not weights).  Leaves named ``bias`` are skipped whatever their rank
    (attention biases are ``[heads, head_dim]``).  A ``layerlab.nets`` MLP gives ``{"0/w":
    [d0, d1], "1/w": ...}``.

    Args:
      params: parameter pytree (or linen variables).
      min_ndim: smallest rank counted as a weight (biases are 1-D).

    Returns:
      ``{name: array}`` in tree order, with the arrays' own shapes.
    """
    return {name: leaf for name, leaf in _named_leaves(params).items()
            if jnp.ndim(leaf) >= min_ndim and name.rpartition("/")[2] != "bias"}


def _weight_matrices(params: Any, out_axes: Mapping[str, int] | None = None,
                     stacks: Mapping[str, tuple[int, ...]] | None = None
                     ) -> dict[str, jax.Array]:
    """:func:`named_weights` read as the linear maps they apply, ``[fan_in, fan_out]``.

    A kernel of rank > 2 is ``[in..., out...]`` (flax's layout for ``Conv``, ``DenseGeneral``,
    attention and NNX's ``LinearGeneral``); its number of output axes is, in this order,
    ``out_axes[module path]`` (known from the module), the rank of a sibling ``bias`` whose
    shape ends the kernel's (the bias has the output shape), or 1 (``[kh, kw, c_in, c_out]
    -> [kh kw c_in, c_out]``).  So an attention query kernel ``[d, heads, head_dim]`` is read
    as ``[d, heads head_dim]`` and the output kernel ``[heads, head_dim, d]`` as ``[heads
    head_dim, d]``.

    ``stacks`` maps module paths to the leading axes ``[L...]`` their parameters are stacked
    on (repeated blocks: ``nn.scan``, ``nnx.vmap``); a kernel there is ``L`` kernels, named
    ``<name>/0 .. <name>/{L-1}``, each read as above.  Elsewhere (plain params, e.g. through
    :func:`from_features`) a kernel whose sibling ``bias`` has its leading axes (a ``[L,
    d_in, d_out]`` kernel with an ``[L, d_out]`` bias) is split the same way: a layer's bias
    has the output shape only, so those axes stack layers (:func:`_bias_lead`).
    """
    leaves = _named_leaves(params)
    out = {}
    for name, w in named_weights(params).items():
        parent = name.rpartition("/")[0]
        b = leaves.get(f"{parent}/bias" if parent else "bias")
        shape = tuple(jnp.shape(w))
        lead = _stack_lead(parent, stacks) or _bias_lead(shape, b)
        if lead and shape[:len(lead)] == lead and len(shape) >= len(lead) + 2:
            b_ok = b is not None and tuple(jnp.shape(b))[:len(lead)] == lead
            for idx in np.ndindex(*lead):
                out[f"{name}/{'/'.join(map(str, idx))}"] = _as_map(
                    w[idx], b[idx] if b_ok else None, (out_axes or {}).get(parent))
        else:
            out[name] = _as_map(w, b, (out_axes or {}).get(parent))
    return out


def _weight_entries(ws: Any) -> dict[str, jax.Array]:
    """The output of an :attr:`Inspectable.weights` function as ``{name: kernel}``: a list or
    tuple of kernels under one name (the blocks of a stack) becomes ``name/0 .. name/{L-1}``.
    Every kernel must be an array of rank >= 2 (``[fan_in, fan_out]``, or ``[..., fan_out]``
    read as ``[prod(...), fan_out]``): anything else is refused naming the entry."""
    if not isinstance(ws, Mapping):
        raise TypeError(f"weights: weights(params) must return a dict {{name: kernel}}, got "
                        f"{type(ws).__name__}.")
    out: dict[str, jax.Array] = {}
    for name, w in ws.items():
        items = (list(enumerate(w)) if isinstance(w, (list, tuple)) else [(None, w)])
        for i, wi in items:
            key = str(name) if i is None else f"{name}/{i}"
            if not hasattr(wi, "shape") or len(wi.shape) < 2:
                got = (f"shape {tuple(wi.shape)}" if hasattr(wi, "shape")
                       else f"a {type(wi).__name__}")
                raise ValueError(
                    f"weights: weights(params)[{key!r}] must be a kernel array of rank >= 2 "
                    f"([fan_in, fan_out]; a list of such kernels for stacked blocks), got "
                    f"{got}.")
            out[key] = wi
    return out


def _bias_lead(shape: tuple[int, ...], b: jax.Array | None) -> tuple[int, ...] | None:
    """The stacked leading axes ``[L...]`` of a kernel of ``shape`` that its bias ``b`` shows:
    ``b`` is ``[L..., out...]`` with ``[L...]`` the kernel's first axes and ``[out...]`` its
    last, and is not itself the kernel's trailing shape (a ``DenseGeneral`` bias ``[heads,
    head_dim]`` of a ``[d, heads, head_dim]`` kernel); at least two axes stay per layer.
    ``None`` otherwise (no bias, or an ordinary one)."""
    if b is None:
        return None
    bs = tuple(jnp.shape(b))
    if len(bs) < 2 or len(bs) > len(shape) - 1 or shape[-len(bs):] == bs:
        return None
    for j in range(1, len(bs)):
        if bs[:j] == shape[:j] and bs[j:] == shape[len(shape) - len(bs) + j:] \
                and len(shape) - j >= 2:
            return bs[:j]
    return None


def _as_map(w: jax.Array, b: jax.Array | None, k: int | None) -> jax.Array:
    """One kernel ``[in..., out...]`` as ``[fan_in, fan_out]``: ``k`` output axes (else the
    rank of a bias ``b`` ending the kernel's shape, else 1)."""
    shape = tuple(jnp.shape(w))
    if len(shape) <= 2:
        return w
    if k is None:
        bs = tuple(jnp.shape(b)) if b is not None else ()
        k = len(bs) if 0 < len(bs) < len(shape) and shape[-len(bs):] == bs else 1
    k = min(max(int(k), 1), len(shape) - 1)
    return jnp.reshape(w, (math.prod(shape[:-k]), math.prod(shape[-k:])))


# ----------------------------------------------------------------------------- stacked blocks
def _stack_lead(path: str, stacks: Mapping[str, tuple[int, ...]] | None
                ) -> tuple[int, ...] | None:
    """The stacked axes of the module at ``path``: those of its deepest stacked ancestor (or
    itself), or ``None``."""
    if not stacks:
        return None
    parts = path.split("/") if path else []
    for i in range(len(parts), 0, -1):
        lead = stacks.get("/".join(parts[:i]))
        if lead:
            return lead
    return None


def _stack_root(path: str, stacks: Mapping[str, tuple[int, ...]]) -> str:
    """The outermost stacked module on ``path`` (the repeated block that holds it)."""
    parts = path.split("/")
    return next(("/".join(parts[:i]) for i in range(1, len(parts) + 1)
                 if "/".join(parts[:i]) in stacks), path)


def _unstack(features: FeaturesFn, stacks_of: Callable[[Any], Mapping[str, tuple[int, ...]]]
             ) -> FeaturesFn:
    """``features`` with the representations of stacked blocks (``[L, n, ...]`` from
    ``nn.scan`` / ``nnx.scan`` / ``nnx.vmap``) split into one per block, ``<name>/0 ..
    <name>/{L-1}``, block by block (``a/0, b/0, a/1, b/1``).  ``stacks_of(params)`` (read
    after ``features`` ran) maps module paths to their stacked axes."""
    def run(params, x):
        feats = features(params, x)
        stacks = stacks_of(params)
        if not stacks:
            return feats
        n = jnp.shape(x)[0]

        def lead_of(k, h):
            lead = _stack_lead(k, stacks)
            sh = tuple(jnp.shape(h))
            ok = lead and len(sh) >= len(lead) + 2 and sh[:len(lead)] == lead and \
                sh[len(lead)] == n
            return (_stack_root(k, stacks), lead) if ok else None

        out: dict[str, jax.Array] = {}
        items = [(k, h, lead_of(k, h)) for k, h in feats.items()]
        i = 0
        while i < len(items):
            k, h, st = items[i]
            if st is None:
                out[k] = h
                i += 1
                continue
            j = i
            while j < len(items) and items[j][2] == st:  # consecutive values of one block
                j += 1
            for idx in np.ndindex(*st[1]):
                for k2, h2, _ in items[i:j]:
                    out[f"{k2}/{'/'.join(map(str, idx))}"] = h2[idx]
            i = j
        return out

    return run


def _walk(tree, prefix: tuple[str, ...], out: dict, calls: set | None = None) -> None:
    """Insertion-ordered flatten of nested mappings/tuples of arrays into ``out``.

    Captured method outputs (a ``__call__`` entry) are named by their module's path, and
    those names are added to ``calls``; the root module's own output (path ``()``) is
    skipped, so a value sown as ``"output"`` keeps that name."""
    if isinstance(tree, Mapping) or hasattr(tree, "items"):
        for k, v in tree.items():
            _walk(v, (*prefix, str(k)), out, calls)
    elif isinstance(tree, (tuple, list)):
        if len(tree) == 1:
            _walk(tree[0], prefix, out, calls)
        else:
            for i, v in enumerate(tree):
                _walk(v, (*prefix, str(i)), out, calls)
    elif hasattr(tree, "get_value"):  # nnx.Variable
        _walk(tree.get_value(), prefix, out, calls)
    elif tree is not None and prefix[:1] != ("__call__",):  # not the model's own output
        name = "/".join(p for p in prefix if p != "__call__")
        if "__call__" in prefix and calls is not None:
            calls.add(name)
        out[name] = tree


# ----------------------------------------------------------------------------- adapters
def from_features(
    features: FeaturesFn,
    *,
    apply: Callable[[Any, jax.Array], jax.Array] | None = None,
    weights: Callable[[Any], Mapping[str, jax.Array]] | None = None,
    output: Any = None,
) -> Inspectable:
    """Any ``features(params, x) -> {name: [n, ...]}`` (the core interface) as an Inspectable.

    Args:
      features: per-layer representations of a batch, samples as rows.
      apply: optional model outputs ``(params, x) -> [n, k]`` (for the NTK diagnostics).
      output: for an ``apply`` returning several things, the ``[n, k]`` array the NTK
        diagnostics use, as with the flax adapters: a key or index into ``apply``'s output
        (``output=0`` of ``(logits, aux)``) or a callable ``out -> [n, k]``.
      weights: optional ``params -> {name: kernel}`` (default: :func:`named_weights`, read as
        described under :attr:`Inspectable.weights`; a kernel ``[L, d_in, d_out]`` whose
        ``bias`` is ``[L, d_out]`` is ``L`` layers' kernels, ``<name>/0 .. <name>/{L-1}``).
        A custom function returns stacked blocks as a list of kernels under one name
        (reported as ``<name>/i``): a bare ``[L, d_in, d_out]`` array is read as one
        ``[L d_in, d_out]`` map, like a convolution's kernel.
    """
    if not callable(features):
        raise TypeError(
            f"from_features: features must be callable features(params, x) -> dict, got "
            f"{type(features).__name__}."
        )
    if output is not None:
        if apply is None:
            raise ValueError(f"from_features: output={output!r} picks from apply's output, but "
                             "no apply was given.")
        pick, f = _output_picker(output, "from_features"), apply
        apply = lambda params, x: pick(f(params, x))  # noqa: E731
    return Inspectable(features=features, apply=apply, weights=weights)


def from_layers(
    layers: Sequence[tuple[str, Callable[[Any, jax.Array], jax.Array]]],
    *,
    weights: Callable[[Any], Mapping[str, jax.Array]] | None = None,
) -> Inspectable:
    """A plain function composed of layers: ``h_i = layer_i(params[i], h_{i-1})``, ``h_0 = x``.

    ``params`` is a sequence with one entry per layer (in order) or a mapping keyed by the
    layer names; a layer without parameters (an activation, a pooling) takes ``None`` there.
    Every ``h_i`` is reported under its name; the last one is the output.

    Args:
      layers: ``[(name, fn), ...]`` with ``fn(layer_params, h) -> h``.
      weights: optional ``params -> {name: kernel}`` as :func:`from_features`' (default:
        :func:`named_weights`, kernels read as ``[..., fan_out]``, flax's layout: return the
        kernels of another layout transposed, e.g. an ``OIHW`` convolution kernel ``w`` as
        ``w.transpose(2, 3, 1, 0)``).

    Returns:
      :class:`Inspectable` with ``features`` and ``apply``.
    """
    layers = list(layers)
    names = [n for n, _ in layers]
    if not layers or len(set(names)) != len(names):
        raise ValueError(f"from_layers: layers must be non-empty with unique names, got {names}.")

    def _param(params, i, name):
        if isinstance(params, Mapping):
            if name not in params:
                raise KeyError(f"from_layers: params has no entry for layer {name!r} (a layer "
                               f"without parameters takes None: params[{name!r}] = None).")
            return params[name]
        if len(params) != len(layers):
            raise ValueError(
                f"from_layers: params has {len(params)} entries for {len(layers)} layers {names}."
            )
        return params[i]

    def run(params, x):
        h, out = x, {}
        for i, (name, fn) in enumerate(layers):
            h = fn(_param(params, i, name), h)
            out[name] = h
        return out

    return Inspectable(features=run, apply=lambda p, x: run(p, x)[names[-1]], weights=weights)


def from_mlp(*, activation: Callable[[jax.Array], jax.Array] = jax.nn.relu) -> Inspectable:
    """A ``layerlab.nets`` MLP (``params = [{"w", "b"}, ...]``): its post-activation hiddens.

    Representations ``hidden_1 .. hidden_{L-1}`` (``h_l = phi(h_{l-1} W_l + b_l)``), weights
    ``"0/w" .. "{L-1}/w"``; the top network of ``hidden_l`` is layers ``l..L`` with their
    mean-field variances (``dgl.mf_variances(params)[l:]``, as in ``dgl.monitor_fn``).  That
    NNGP is the ReLU one (``dgl.top_kernel``), so it is given for ``activation=jax.nn.relu``
    only: with another activation (``jnp.tanh``: no closed-form kernel in
    ``layerlab.kernels``; erf's is not tanh's) ``top_variances`` is ``None`` and ``dgl_nngp``
    uses the configured :class:`~layerlab.inspect.TopNetwork`, as for any model without one.
    """
    from layerlab.nets import mlp_apply

    def features(params, x):
        _, hidden = mlp_apply(params, x, activation=activation, return_hidden=True)
        return {f"hidden_{i + 1}": h for i, h in enumerate(hidden)}

    def top(params):
        v = mf_variances(params)
        return {
            f"hidden_{i}": LayerVariances(v.w_var[i:], v.b_var[i:]) for i in range(1, len(params))
        }

    return Inspectable(
        features=features,
        apply=lambda p, x: mlp_apply(p, x, activation=activation),
        top_variances=top if activation is jax.nn.relu else None,
    )


def from_revmlp(frozen: RevMLPFrozen, readout: jax.Array | None = None) -> Inspectable:
    """The reversible MLP of ``layerlab.gnrev``: block outputs ``block_1 .. block_L``.

    Weights: ``block_l/w1`` and ``block_l/w2`` (``[d', h]`` each, sliced from the stacked
    params).

    Args:
      frozen: its ``RevMLPFrozen``.  readout: optional ``[d, C]`` fixed readout; the NTK
        uses ``revmlp_apply(params, frozen, x) @ readout`` (the body output without it).
    """
    from layerlab.gnrev import revmlp_apply, revmlp_hidden

    def features(params, x):
        hs = revmlp_hidden(params, frozen, x)
        return {f"block_{i}": hs[i] for i in range(1, hs.shape[0])}

    def weights(params):  # the stacked [L, d', h] kernels, one matrix per block and half
        return {f"block_{i + 1}/{k}": params[k][i]
                for i in range(params["w1"].shape[0]) for k in ("w1", "w2")}

    def apply(params, x):
        y = revmlp_apply(params, frozen, x)
        return y if readout is None else y @ readout

    return Inspectable(features=features, apply=apply, weights=weights)


def _output_picker(output, fn: str) -> Callable[[Any], Any]:
    """``output=`` of the flax adapters: ``None`` (the output as is), a callable ``out ->
    array`` or a key / index ``out[output]`` into a tuple or dict output."""
    if output is None:
        return lambda out: out
    if callable(output):
        return output
    if isinstance(output, bool) or not isinstance(output, (int, str)):
        raise TypeError(
            f"{fn}: output must be None, a callable out -> [n, k] array, or a key / index "
            f"into the model's output, got {type(output).__name__} {output!r}.")

    def pick(out):
        try:
            return out[output]
        except (KeyError, IndexError, TypeError) as e:
            got = jax.tree.map(lambda a: list(jnp.shape(a)), out)
            raise ValueError(
                f"{fn}: output={output!r} selects nothing from the model's output "
                f"({type(out).__name__} {got}).") from e

    return pick


def _default_linen_filter(module, method_name: str) -> bool:
    import flax.linen as nn

    return method_name == "__call__" and isinstance(
        module, (nn.Dense, nn.DenseGeneral, nn.Conv, nn.ConvTranspose)
    )


def from_linen(
    model: nn.Module,
    *,
    capture: Callable | bool = True,
    apply_kwargs: Mapping[str, Any] | None = None,
    output: Callable[[Any], jax.Array] | int | str | None = None,
) -> Inspectable:
    """A flax linen module: the outputs of its layers and everything it ``sow``-s.

    ``features(variables, x)`` runs ``model.apply(variables, x, capture_intermediates=...,
    mutable=["intermediates"])`` and reads the ``"intermediates"`` collection: the outputs of
    every ``nn.Dense``/``nn.Conv`` sub-module (pre-activation, named by module path, e.g.
    ``"Conv_0"``) when ``capture=True``, and every value sown with
    ``self.sow("intermediates", name, h)`` (e.g. post-activation representations).  Layers
    are reported in call order (read off the traced program, as :func:`from_nnx`); a module
    called twice reports ``<path>/0`` and ``<path>/1`` at the two places it ran.  Blocks
    repeated by ``nn.scan`` / ``nn.vmap`` (parameters stacked on a leading axis ``L``, as
    ``variable_axes={"params": 0}``; recognised while ``features`` runs, from the kernel
    shapes the modules see) report ``<name>/0 .. <name>/{L-1}`` block by block, and their
    kernels ``<path>/kernel/0 ..`` one per block.

    Weights: the kernels of the ``"params"`` collection (not ``batch_stats`` or other
    collections, not biases) as the linear maps they apply, ``[fan_in, fan_out]``: a
    ``DenseGeneral`` / attention kernel ``[in..., out...]`` is split by its module's
    ``features`` (known once ``features`` has run; :func:`layer_report` runs it first) or
    else by the shape of its bias; other kernels of rank > 2 (convolutions) as
    ``[prod(shape[:-1]), shape[-1]]``.

    Args:
      model: a ``flax.linen.Module``.
      capture: ``True`` (Dense/Conv outputs), ``False`` (sown values only) or a linen
        filter ``(module, method_name) -> bool``.
      apply_kwargs: extra keyword arguments for ``model.apply`` (e.g. ``{"train": False}``);
        ``"mutable"`` names collections the model updates in that mode (e.g. ``{"train":
        True, "mutable": ["batch_stats"]}`` for BatchNorm on the batch's statistics): they are
        made mutable and their updates discarded (the caller's variables are never changed).
      output: for a model whose output is not one ``[n, k]`` array: the NTK diagnostics'
        output, as a key or index into it (``output=0`` of a tuple ``(logits, aux)``,
        ``output="logits"`` of a dict) or a callable ``out -> [n, k]``.

    Returns:
      :class:`Inspectable`; ``params`` is the linen variables dict (``{"params": ...}``; a bare
      params tree is wrapped).  Its ``"intermediates"`` collection, if any (values sown by an
      earlier call, as in variables rebuilt from ``apply(..., mutable=True)``), is ignored:
      the adapter captures into that collection (the one ``capture_intermediates`` writes,
      not configurable) afresh on every call.
    """
    import flax.linen as nn

    kw = dict(apply_kwargs or {})
    extra = kw.pop("mutable", ())
    extra = [extra] if isinstance(extra, str) else list(extra)
    if any(m in (True, False) for m in extra) or "intermediates" in extra:
        raise ValueError(
            "from_linen: apply_kwargs['mutable'] must name the collections the model updates "
            f"(e.g. ['batch_stats']), without 'intermediates'; got {extra!r}.")
    flt = _default_linen_filter if capture is True else capture
    pick = _output_picker(output, "from_linen")
    out_axes: dict[str, int] = {}  # module path -> number of output axes of its kernel
    seen: dict[str, dict[str, tuple]] = {}  # module path -> its params' shapes as it sees them

    def record(next_fun, args, kwargs, context):
        m = context.module
        if context.method_name == "__call__" and isinstance(m, nn.DenseGeneral):
            f = m.features
            out_axes["/".join(m.path)] = len(f) if isinstance(f, Sequence) else 1
        if m.path and m.scope is not None:  # inside nn.scan / nn.vmap: one block's slice
            p = m.variables.get("params")
            if p:
                seen["/".join(m.path)] = {_path_name(q): tuple(jnp.shape(a)) for q, a
                                          in jax.tree_util.tree_leaves_with_path(p)}
        return next_fun(*args, **kwargs)

    def _vars(params):
        """The linen variables to run on: a bare params tree wrapped; without the
        "intermediates" collection (values sown by an earlier call, e.g. variables rebuilt
        from ``apply(..., mutable=True)``), which the adapter captures into afresh."""
        if not (isinstance(params, Mapping) and "params" in params):
            return {"params": params}
        return {c: v for c, v in params.items() if c != "intermediates"}

    def stacks_of(params):
        """Module paths whose parameters carry leading axes the module does not see: blocks
        repeated by ``nn.scan`` / ``nn.vmap`` (``variable_axes={"params": 0}``)."""
        leaves = _named_leaves(_vars(params))
        out = {}
        for path, shapes in seen.items():
            leads = set()
            for leaf, sh in shapes.items():
                full = tuple(jnp.shape(leaves[f"{path}/{leaf}"])) \
                    if f"{path}/{leaf}" in leaves else None
                k = -1 if full is None else len(full) - len(sh)
                leads.add(full[:k] if k > 0 and full[k:] == sh else ())
            if len(leads) == 1 and (lead := leads.pop()):
                out[path] = lead
        return out

    def raw_features(params, x):
        with nn.intercept_methods(record):
            _, state = model.apply(_vars(params), x, capture_intermediates=flt,
                                   mutable=["intermediates", *extra], **kw)
        out: dict[str, jax.Array] = {}
        _walk(state.get("intermediates", {}), (), out)  # (without the model's own output)
        return out

    def trainable(params):  # the NTK is taken w.r.t. "params" only (not batch_stats, ...)
        v = _vars(params)
        return v["params"], lambda theta: {**v, "params": theta}

    def apply(params, x):
        if extra:
            return pick(model.apply(_vars(params), x, mutable=extra, **kw)[0])
        return pick(model.apply(_vars(params), x, **kw))

    def weights(params):
        return _weight_matrices(_vars(params)["params"], out_axes, stacks_of(params))

    return Inspectable(features=_unstack(_in_call_order(raw_features), stacks_of),
                       apply=apply, weights=weights, trainable=trainable, channels_last=True)


def from_nnx(
    model: nnx.Module,
    *,
    capture: bool = True,
    output: Callable[[Any], jax.Array] | int | str | None = None,
    call_kwargs: Mapping[str, Any] | None = None,
) -> Inspectable:
    """A flax NNX module: sown ``nnx.Intermediate`` values and its layers' outputs.

    The module is split once, ``graphdef, state = nnx.split(model)``; ``params`` is then
    ``state`` (an ``nnx.State`` pytree: train it, jit it, pass it here).  ``features(state, x)``
    merges and calls the model under ``nnx.capture(..., nnx.Intermediate,
    method_outputs=nnx.Intermediate)``: values sown with ``self.sow(nnx.Intermediate, name, h)``
    and, with ``capture=True``, the ``__call__`` outputs of every ``nnx.Linear``/``nnx.Conv``
    sub-module, named by attribute path (``"l1"``, ``"blocks/0/conv"``).

    The train/eval mode is the model's when the adapter is built (``nnx.split`` puts flags such
    as ``use_running_average`` and ``deterministic`` in the graph definition): call
    ``model.eval()`` (or ``model.train()``) *before* ``from_nnx(model)``.  Each call merges a
    copy of ``state``, so the caller's state and model are never updated (BatchNorm statistics
    in train mode, RNG counters).  Layers are reported in call order (read off the traced
    program), not in the alphabetical order of ``nnx.State``.  The NTK differentiates the
    ``nnx.Param`` leaves only.  Blocks made with ``nnx.vmap`` (an ``nnx.Linear`` /
    ``LinearGeneral`` / ``Conv`` whose kernel has leading axes beyond its own shape, and the
    modules all of whose such layers share them) report ``<name>/0 .. <name>/{L-1}``, and
    their kernels one per block.

    Values the model sowed in an earlier call (``nnx.Intermediate``) are dropped from the
    module and from every ``state`` passed (an ``nnx.State`` or a plain dict such as
    ``nnx.to_pure_dict(nnx.state(model))``: there, every entry the model's own state lacks),
    so ``nnx.state(model)`` works before and after the model has been called.  Every other
    entry of the model's state must be there: the ``params`` of ``graphdef, params, rest =
    nnx.split(model, nnx.Param, ...)`` alone (no BatchNorm statistics, RNG state) is refused
    with a ``ValueError`` naming the missing entries, not completed from the model as built
    (whose statistics may be untrained): pass ``nnx.merge_state(params, rest)``.

    Weights: the ``nnx.Param`` kernels (not biases, not sown values or BatchNorm statistics)
    as the linear maps they apply, ``[fan_in, fan_out]``: a ``LinearGeneral`` kernel
    (attention's query/key/value ``[d, heads, head_dim]`` and output ``[heads, head_dim,
    d]``) split by the module's ``out_features``, a convolution ``[kh, kw, c_in, c_out]`` as
    ``[kh kw c_in, c_out]``.

    Args:
      model: an ``nnx.Module``.  capture: also report the Linear/Conv outputs.
      output: for a model whose output is not one ``[n, k]`` array: the NTK diagnostics'
        output, as a key or index into it (``output=0`` of a tuple ``(logits, aux)``,
        ``output="logits"`` of a dict) or a callable ``out -> [n, k]``.
      call_kwargs: keyword arguments of every model call, ``model(x, **call_kwargs)`` (the
        counterpart of :func:`from_linen`'s ``apply_kwargs``), e.g. ``{"train": False}`` for
        a ``__call__(self, x, train)``.  Plain values and arrays (held fixed); not NNX
        objects such as an ``nnx.Rngs`` (mutable state the pure, jittable adapter cannot
        update: give the model its ``rngs`` when it is built, they are then in its state).

    Returns:
      :class:`Inspectable` whose ``params`` is the ``nnx.State`` of ``nnx.split(model)``.
    """
    from flax import nnx

    if not isinstance(model, nnx.Module):
        raise TypeError(f"from_nnx: model must be an nnx.Module, got {type(model).__name__}.")
    kw = _nnx_call_kwargs(call_kwargs, nnx)
    # values sown by an earlier call of the model are not part of its parameters: the graph
    # definition and every state passed later are taken without nnx.Intermediate
    clean = nnx.clone(model)
    nnx.pop(clean, nnx.Intermediate)
    graphdef, clean_state = nnx.split(clean)
    clean_pure = nnx.to_pure_dict(clean_state)
    clean_types = {"/".join(map(str, path)): type(v).__name__
                   for path, v in nnx.to_flat_state(clean_state)}
    pick = _output_picker(output, "from_nnx")
    layer_types = (nnx.Linear, nnx.LinearGeneral, nnx.Conv, nnx.ConvTranspose)
    module_paths, layer_paths = set(), set()
    warned: set[str] = set()  # sown names that shadow a sub-module (warned once)
    out_axes: dict[str, int] = {}  # module path -> number of output axes of its kernel
    typed: dict[str, tuple[int, ...]] = {}  # layer path -> stacked axes of its kernel (or ())
    for path, m in nnx.iter_modules(model):
        name = "/".join(str(p) for p in path)
        module_paths.add(name)
        if path and isinstance(m, layer_types):
            layer_paths.add(name)
        if isinstance(m, nnx.LinearGeneral):
            out_axes[name] = len(m.out_features)
        lead = _nnx_stacked_axes(m, nnx)
        if path and lead is not None:
            typed[name] = lead
    stacks = _nnx_stacks(typed, module_paths)

    def keep(k: str, calls: set) -> bool:
        """Sown values (whatever their name) and Linear/Conv outputs; not the outputs of
        containers.  A module called twice reports ``<path>/0``, ``<path>/1``: judged by
        ``<path>``."""
        if k not in calls:  # a value the model sowed itself
            return True
        parts = k.split("/")
        while True:
            name = "/".join(parts)
            if name in layer_paths:
                return True
            if name in module_paths:
                return False
            if len(parts) > 1 and parts[-1].isdigit():
                parts = parts[:-1]
                continue
            return True

    def params_only(state):
        if isinstance(state, nnx.Module):
            raise TypeError(
                "params: from_nnx's params is the model's nnx.State, not the module: pass "
                "nnx.state(model) (or nnx.split(model)[1]).")
        if isinstance(state, Mapping):  # nnx.State or a pure dict: every entry there?
            _check_complete(state, clean_pure, clean_types)
        if not isinstance(state, nnx.State):
            # a pure dict (to_pure_dict, an orbax restore): typed through the graph (the NTK
            # needs to know which leaves are nnx.Param), without the entries of sown values
            state = nnx.state(nnx.merge(graphdef, _restrict(state, clean_pure), copy=True))
        return nnx.filter_state(state, nnx.Not(nnx.Intermediate))

    def raw_features(state, x):
        state = params_only(state)
        mod = nnx.merge(graphdef, state, copy=True)  # never updates the caller's Variables
        if capture:
            _, inter = nnx.capture(mod, nnx.Intermediate,
                                   method_outputs=nnx.Intermediate)(x, **kw)
        else:
            _, inter = nnx.capture(mod, nnx.Intermediate)(x, **kw)
        raw: dict[str, jax.Array] = {}
        calls: set[str] = set()  # names of captured method outputs (not sown values)
        _walk(inter, (), raw, calls)
        if capture:
            _warn_shadowed([k for k in raw if k not in calls], module_paths, layer_paths,
                           warned)
        return {k: h for k, h in raw.items() if keep(k, calls)}

    def apply(state, x):  # under capture, so sown values do not leak into the module
        mod = nnx.merge(graphdef, params_only(state), copy=True)
        return pick(nnx.capture(mod, nnx.Intermediate)(x, **kw)[0])

    def weights(state):  # the nnx.Param kernels only
        return _weight_matrices(nnx.filter_state(params_only(state), nnx.Param), out_axes,
                                stacks)

    def trainable(state):  # the NTK is taken w.r.t. the nnx.Param leaves only
        theta, rest = nnx.split_state(params_only(state), nnx.Param, ...)
        return theta, lambda t: nnx.merge_state(t, rest)

    return Inspectable(features=_unstack(_in_call_order(raw_features), lambda _: stacks),
                       apply=apply, weights=weights, trainable=trainable, channels_last=True)


def _nnx_call_kwargs(call_kwargs: Any, nnx: Any) -> dict[str, Any]:
    """``from_nnx``'s ``call_kwargs`` checked: a mapping of names to plain values (no NNX
    object: an ``nnx.Rngs`` or module is state the adapter cannot update under ``jit``)."""
    if call_kwargs is None:
        return {}
    if not isinstance(call_kwargs, Mapping) or not all(isinstance(k, str) for k in call_kwargs):
        raise TypeError(
            "from_nnx: call_kwargs must be a dict of keyword arguments for model(x, ...), e.g. "
            f"{{'train': False}}; got {type(call_kwargs).__name__} {call_kwargs!r}.")
    def is_node(a):
        return isinstance(a, (nnx.Pytree, nnx.Variable))

    for k, v in call_kwargs.items():
        bad = next((a for a in jax.tree.leaves(v, is_leaf=is_node) if is_node(a)), None)
        if bad is not None:
            what = "an nnx.Rngs" if isinstance(bad, nnx.Rngs) else f"an NNX {type(bad).__name__}"
            raise TypeError(
                f"from_nnx: call_kwargs[{k!r}] is {what}: NNX objects hold mutable state "
                "(RNG counters, variables) that the adapter's pure, jittable calls cannot "
                "update.  Give the model its rngs when it is built (e.g. nnx.Dropout(rate, "
                "rngs=rngs)): they are then part of its state; pass plain values or arrays "
                "here.")
    return dict(call_kwargs)


def _nnx_stacked_axes(m: Any, nnx: Any) -> tuple[int, ...] | None:
    """The leading axes an NNX layer's kernel has beyond one application's kernel shape
    (``()`` for none: a repeated block made with ``nnx.vmap`` has ``[L, ...]``), or ``None``
    where that shape is not known from the module."""
    if isinstance(m, nnx.Linear):
        want = (m.in_features, m.out_features)
    elif isinstance(m, nnx.LinearGeneral):
        want = None if m.batch_axis else (*m.in_features, *m.out_features)
    else:  # Conv, ConvTranspose, Einsum
        want = getattr(m, "kernel_shape", None)
    kernel = getattr(m, "kernel", None)
    if want is None or kernel is None or not hasattr(kernel, "get_value"):
        return None
    have = tuple(jnp.shape(kernel.get_value()))
    want = tuple(want)
    k = len(have) - len(want)
    return have[:k] if k >= 0 and have[k:] == want else None


def _nnx_stacks(typed: Mapping[str, tuple[int, ...]], module_paths: set
                ) -> dict[str, tuple[int, ...]]:
    """Module paths stacked on leading axes ``[L...]``: a layer whose kernel is, and a module
    all of whose layers (of known kernel shape, at least one) are, stacked on the same."""
    out = {p: lead for p, lead in typed.items() if lead}
    for path in module_paths:
        if not path or path in typed:
            continue
        below = {lead for p, lead in typed.items() if p.startswith(f"{path}/")}
        if len(below) == 1 and (lead := next(iter(below))):
            out[path] = lead
    return out


def _warn_shadowed(sown: Sequence[str], module_paths: set, layer_paths: set,
                   warned: set) -> None:
    """A value sown under a sub-module's name replaces, in ``nnx.capture``'s state, the
    captured outputs of that sub-module's layers: the sown value is reported, they are not
    (a warning, once per adapter and name)."""
    import warnings

    for k in sown:
        if k in module_paths and k not in warned:
            warned.add(k)
            lost = sorted(p for p in layer_paths if p == k or p.startswith(f"{k}/"))
            if lost:
                warnings.warn(
                    f"from_nnx: the value sown as {k!r} has the name of sub-module {k!r}; "
                    f"nnx.capture stores it in place of that module's captured outputs, so the "
                    f"layers {lost} are not reported (the sown value is).  Rename the sow to "
                    "report both.", stacklevel=4)


def _missing(tree: Any, like: Any, prefix: str = "") -> list[str]:
    """The ``/``-joined leaf paths of ``like`` (nested mappings) that ``tree`` lacks (keys
    compared as strings, as :func:`_restrict`)."""
    if not isinstance(like, Mapping):
        return []
    have = {str(k): v for k, v in tree.items()} if isinstance(tree, Mapping) else {}
    out: list[str] = []
    for k, v in like.items():
        path = f"{prefix}{k}"
        if str(k) in have:
            out += _missing(have[str(k)], v, f"{path}/")
        elif isinstance(v, Mapping):
            out += _missing({}, v, f"{path}/")
        else:
            out.append(path)
    return out


def _check_complete(state: Mapping, clean_pure: Mapping, types: Mapping[str, str]) -> None:
    """``from_nnx``'s ``params`` must hold every entry of the model's state: a state split
    off as ``nnx.split(model, nnx.Param, ...)[1]`` lacks BatchNorm statistics and RNG state,
    which are not filled from the model as built (its statistics may be untrained)."""
    miss = _missing(state, clean_pure)
    if not miss:
        return
    shown = ", ".join(f"{p!r} ({types.get(p, '?')})" for p in miss[:6])
    more = f", ... {len(miss) - 6} more" if len(miss) > 6 else ""
    raise ValueError(
        f"params: the state lacks {len(miss)} of the model's {len(types)} entries ({shown}"
        f"{more}): from_nnx's params is the model's full state, not only its nnx.Param "
        "leaves (as split off by graphdef, params, rest = nnx.split(model, nnx.Param, ...)); "
        "the rest is not taken from the model as built, whose BatchNorm statistics may be "
        "untrained.  Pass the full state: nnx.state(model), or nnx.merge_state(params, rest).")


def _restrict(tree: Any, like: Any) -> Any:
    """``tree`` (nested mappings) without the entries ``like`` lacks (keys compared as
    strings: a restored checkpoint may hold ``"0"`` for ``0``)."""
    if not (isinstance(tree, Mapping) and isinstance(like, Mapping)):
        return tree
    keys = {str(k): k for k in like}
    return {k: _restrict(v, like[keys[str(k)]]) for k, v in tree.items() if str(k) in keys}


def _in_call_order(raw_features: FeaturesFn) -> FeaturesFn:
    """``raw_features`` with its layers sorted into call order (:func:`_call_order`), traced
    once per (names, input shape and dtype, params structure)."""
    orders: dict = {}

    def features(params, x):
        raw = raw_features(params, x)
        names = list(raw)
        key = (tuple(names), jnp.shape(x), str(jnp.result_type(x)), jax.tree.structure(params))
        if key not in orders:
            try:
                orders[key] = _call_order(raw_features, params, x, names)
            except (jax.errors.ConcretizationTypeError, jax.errors.TracerBoolConversionError,
                    jax.errors.TracerIntegerConversionError,
                    jax.errors.TracerArrayConversionError):
                orders[key] = names  # a model that cannot be traced: the adapter's own order
        return {k: raw[k] for k in orders[key]}

    return features


def _call_order(fn: Callable[[Any, jax.Array], Mapping[str, jax.Array]], params, x,
                names: list[str]) -> list[str]:
    """``names`` (the keys of ``fn(params, x)``) sorted by where the traced program computes
    each value: a jaxpr lists its equations in execution order.  Values computed inside one
    call (e.g. a jitted sub-module) or passed through from the inputs keep their given order.
    """
    def outputs(p, xx):
        r = fn(p, xx)  # one run of the model
        return [r[k] for k in names]

    jaxpr = jax.make_jaxpr(outputs)(params, x).jaxpr
    where: dict[Any, int] = {}
    for i, eqn in enumerate(jaxpr.eqns):
        for v in eqn.outvars:
            where[v] = i
    from jax.extend.core import Var

    pos = [where.get(v, -1) if isinstance(v, Var) else -1 for v in jaxpr.outvars]
    return [n for _, _, n in sorted(zip(pos, range(len(names)), names, strict=True))]
