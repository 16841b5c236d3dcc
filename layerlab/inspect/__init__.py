"""Layer reports for any JAX model: the four papers' per-layer diagnostics, standalone and live.

The core takes ``features(params, x) -> {name: [n, ...]}``, the per-layer representations of a
probe batch; adapters build it (an :class:`Inspectable`) for flax linen
(:func:`from_linen`), flax NNX (:func:`from_nnx`), plain layer-composed functions
(:func:`from_layers`, :func:`from_features`) and the toolkit's nets (:func:`from_mlp`,
:func:`from_revmlp`).  :func:`layer_report` computes, per layer, DGL@Linear and DGL under an
NNGP top kernel (``layerlab.dgl``), linear CKA to a reference, effective and stable rank
(``layerlab.probes``); per weight kernel, its spectrum and the number of singular values near
1 (paper B); for the model, empirical-NTK alignment (``layerlab.kernels``).  :func:`monitor`
gives an ``eval_fn`` for ``layerlab.loop.fit``; :func:`plot_report` and :func:`plot_history`
draw them.  See ``docs/inspect.md``.
"""
from layerlab.inspect._models import Inspectable as Inspectable
from layerlab.inspect._models import from_features as from_features
from layerlab.inspect._models import from_layers as from_layers
from layerlab.inspect._models import from_linen as from_linen
from layerlab.inspect._models import from_mlp as from_mlp
from layerlab.inspect._models import from_nnx as from_nnx
from layerlab.inspect._models import from_revmlp as from_revmlp
from layerlab.inspect._models import named_weights as named_weights
from layerlab.inspect._monitor import History as History
from layerlab.inspect._monitor import Monitor as Monitor
from layerlab.inspect._monitor import monitor as monitor
from layerlab.inspect._plots import plot_history as plot_history
from layerlab.inspect._plots import plot_report as plot_report
from layerlab.inspect._report import DIAGNOSTICS as DIAGNOSTICS
from layerlab.inspect._report import LAYER_DIAGNOSTICS as LAYER_DIAGNOSTICS
from layerlab.inspect._report import MODEL_DIAGNOSTICS as MODEL_DIAGNOSTICS
from layerlab.inspect._report import OPTIONAL_DIAGNOSTICS as OPTIONAL_DIAGNOSTICS
from layerlab.inspect._report import WEIGHT_DIAGNOSTICS as WEIGHT_DIAGNOSTICS
from layerlab.inspect._report import InspectConfig as InspectConfig
from layerlab.inspect._report import Reference as Reference
from layerlab.inspect._report import Report as Report
from layerlab.inspect._report import TopNetwork as TopNetwork
from layerlab.inspect._report import layer_report as layer_report
from layerlab.inspect._report import make_reference as make_reference
from layerlab.inspect._report import representations as representations

__all__ = [
    "DIAGNOSTICS",
    "History",
    "InspectConfig",
    "Inspectable",
    "LAYER_DIAGNOSTICS",
    "MODEL_DIAGNOSTICS",
    "OPTIONAL_DIAGNOSTICS",
    "Monitor",
    "Reference",
    "Report",
    "TopNetwork",
    "WEIGHT_DIAGNOSTICS",
    "from_features",
    "from_layers",
    "from_linen",
    "from_mlp",
    "from_nnx",
    "from_revmlp",
    "layer_report",
    "make_reference",
    "monitor",
    "named_weights",
    "plot_history",
    "plot_report",
    "representations",
]
