"""Deep Gaussian Layer-wise losses (DGL), LEGO training and monitoring.

Ben-David & Ringel, "The role of a layer in deep neural networks: a Gaussian
Process perspective" (2019).

* losses: :func:`dgl_loss` (eq. 3 / A7, Cholesky-based with an analytic gradient),
  :func:`dgl_features`, :func:`dgl_linear` (eq. 6), :func:`ib_pairwise_loss` (eq. 8),
  :func:`dgl_minibatch`, :func:`loo_residuals`, :func:`check_kernel`;
* top-network kernels: :func:`top_kernel` (eq. 2, via ``layerlab.kernels.relu_nngp``),
  :func:`stax_kernel_fn` (any neural-tangents top network), :func:`mf_variances` (MF),
  :func:`fit_variances` (FIT), :func:`sample_relu_outputs`, :func:`mc_covariance`;
* LEGO and monitoring through ``layerlab.loop``: :func:`lego`, :func:`train_end_to_end`,
  :func:`train_layer_dgl`, :func:`random_features`, :func:`monitor_fn`;
* the paper's data protocol: :func:`dgl_protocol` (alias :func:`protocol`);
* reproductions (Table I, Figs. 1 and 4): :mod:`layerlab.dgl.experiments`.
"""
from . import experiments as experiments
from ._kernels import LayerVariances as LayerVariances
from ._kernels import fit_variances as fit_variances
from ._kernels import mc_covariance as mc_covariance
from ._kernels import mf_variances as mf_variances
from ._kernels import sample_relu_outputs as sample_relu_outputs
from ._kernels import stax_kernel_fn as stax_kernel_fn
from ._kernels import top_kernel as top_kernel
from ._kernels import top_kernel_fn as top_kernel_fn
from ._lego import LegoConfig as LegoConfig
from ._lego import fit_classifier as fit_classifier
from ._lego import hidden_representations as hidden_representations
from ._lego import layer_dgl as layer_dgl
from ._lego import lego as lego
from ._lego import monitor_fn as monitor_fn
from ._lego import mse_loss as mse_loss
from ._lego import random_features as random_features
from ._lego import train_end_to_end as train_end_to_end
from ._lego import train_layer_dgl as train_layer_dgl
from ._loss import check_kernel as check_kernel
from ._loss import dgl_features as dgl_features
from ._loss import dgl_linear as dgl_linear
from ._loss import dgl_loss as dgl_loss
from ._loss import dgl_loss_reference as dgl_loss_reference
from ._loss import dgl_minibatch as dgl_minibatch
from ._loss import dgl_subsets_exact as dgl_subsets_exact
from ._loss import ib_pairwise_loss as ib_pairwise_loss
from ._loss import loo_residuals as loo_residuals
from ._protocol import DGLSplits as DGLSplits
from ._protocol import dgl_protocol as dgl_protocol
from ._protocol import protocol as protocol

__all__ = [
    "DGLSplits",
    "LayerVariances",
    "LegoConfig",
    "check_kernel",
    "dgl_features",
    "dgl_linear",
    "dgl_loss",
    "dgl_loss_reference",
    "dgl_minibatch",
    "dgl_protocol",
    "experiments",
    "dgl_subsets_exact",
    "fit_classifier",
    "fit_variances",
    "hidden_representations",
    "ib_pairwise_loss",
    "layer_dgl",
    "lego",
    "loo_residuals",
    "mc_covariance",
    "mf_variances",
    "monitor_fn",
    "mse_loss",
    "protocol",
    "random_features",
    "sample_relu_outputs",
    "stax_kernel_fn",
    "top_kernel",
    "top_kernel_fn",
    "train_end_to_end",
    "train_layer_dgl",
]
