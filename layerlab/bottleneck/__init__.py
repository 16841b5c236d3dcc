"""L2-regularised DNNs: reformulations, attraction/repulsion, bottleneck structure.

(A) Jacot, Golikov, Hongler, Gabriel, "Feature Learning in L2-regularized DNNs:
Attraction/Repulsion and Sparsity" (NeurIPS 2022).
(B) Jacot, "Bottleneck Structure in Learned Features: Low-Dimension vs Regularity
Tradeoff" (NeurIPS 2023).

Convention: samples are rows at every public function.  Inputs ``x`` are ``[N, n_0]``, the
representations (pre-activations) ``Z_l`` are ``[N, n_l]``, outputs and targets ``[N, n_L]``,
kernels over samples (``K_l = Z_l Z_l^T``) ``[N, N]``.  Parameters are ``layerlab.nets`` params
``[{"w": [n_{l-1}, n_l], "b": [n_l]}, ...]`` (the one dense-net layout:
``Z_L = layerlab.nets.mlp_apply(params, x)``).

Paper A writes the transpose (columns are data points): its ``X``, ``Z_l`` are our ``x^T``,
``Z_l^T``, and its ``W_l = [w_l^T, b_l / beta]`` ``[n_l, n_{l-1} + 1]`` multiplies
``[sigma(Z_{l-1})^T; beta 1^T]``.  That view of the params is :func:`from_mlp_params` (one layer:
:func:`from_mlp_layer`), back with :func:`to_mlp_params`; the paper's maths lives in the private
modules in its own notation and the public functions transpose at the edge.  ``beta`` (amount of
bias) weighs the biases in the paper's norm ``||W_l||^2 = ||w_l||^2 + ||b_l||^2 / beta^2``
(:func:`weight_norm_sq`); ``beta = 0`` is a net without biases.
"""
from layerlab.bottleneck._covariances import Covariances as Covariances
from layerlab.bottleneck._covariances import covariance_loss as covariance_loss
from layerlab.bottleneck._covariances import covariances as covariances
from layerlab.bottleneck._covariances import psd_pinv as psd_pinv
from layerlab.bottleneck._cprank import bipartite_matrix as bipartite_matrix
from layerlab.bottleneck._cprank import bipartite_width_n_network as bipartite_width_n_network
from layerlab.bottleneck._cprank import complete_bipartite_edges as complete_bipartite_edges
from layerlab.bottleneck._cprank import (
    identity_inputs_loss_lower_bound as identity_inputs_loss_lower_bound,
)
from layerlab.bottleneck._cprank import incidence_matrix as incidence_matrix
from layerlab.bottleneck._cprank import is_triangle_free as is_triangle_free
from layerlab.bottleneck._cprank import (
    shallow_min_norm_identity_inputs as shallow_min_norm_identity_inputs,
)
from layerlab.bottleneck._diagnostics import bottleneck_diagnostics as bottleneck_diagnostics
from layerlab.bottleneck._diagnostics import centred_weight_counts as centred_weight_counts
from layerlab.bottleneck._diagnostics import jacobian_stats as jacobian_stats
from layerlab.bottleneck._diagnostics import layer_counts_near_one as layer_counts_near_one
from layerlab.bottleneck._diagnostics import layer_singular_values as layer_singular_values
from layerlab.bottleneck._diagnostics import network_fn as network_fn
from layerlab.bottleneck._diagnostics import ntk_trace as ntk_trace
from layerlab.bottleneck._diagnostics import representation_dims as representation_dims
from layerlab.bottleneck._forces import Forces as Forces
from layerlab.bottleneck._forces import forces as forces
from layerlab.bottleneck._forces import linear_optimal_covariances as linear_optimal_covariances
from layerlab.bottleneck._forces import linear_optimal_regulariser as linear_optimal_regulariser
from layerlab.bottleneck._frank_wolfe import cp_rank_lower_bound as cp_rank_lower_bound
from layerlab.bottleneck._frank_wolfe import frank_wolfe_shallow as frank_wolfe_shallow
from layerlab.bottleneck._layout import from_mlp_layer as from_mlp_layer
from layerlab.bottleneck._layout import from_mlp_params as from_mlp_params
from layerlab.bottleneck._layout import to_mlp_params as to_mlp_params
from layerlab.bottleneck._layout import weight_norm_sq as weight_norm_sq
from layerlab.bottleneck._optimise import representation_step as representation_step
from layerlab.bottleneck._rank_sigma import caratheodory_reduce as caratheodory_reduce
from layerlab.bottleneck._rank_sigma import neuron_pairs as neuron_pairs
from layerlab.bottleneck._rank_sigma import rank_sigma_bounds as rank_sigma_bounds
from layerlab.bottleneck._representations import ACTIVATIONS as ACTIVATIONS
from layerlab.bottleneck._representations import augment as augment
from layerlab.bottleneck._representations import representation_loss as representation_loss
from layerlab.bottleneck._representations import representations as representations
from layerlab.bottleneck._representations import tikhonov_pinv as tikhonov_pinv
from layerlab.bottleneck._representations import weight_loss as weight_loss
from layerlab.bottleneck._representations import (
    weights_from_representations as weights_from_representations,
)
from layerlab.bottleneck._sweeps import cross_entropy_cost as cross_entropy_cost
from layerlab.bottleneck._sweeps import masked_loss as masked_loss
from layerlab.bottleneck._sweeps import masked_weights as masked_weights
from layerlab.bottleneck._sweeps import mse_cost as mse_cost
from layerlab.bottleneck._sweeps import plateau_start as plateau_start
from layerlab.bottleneck._sweeps import polish_step as polish_step
from layerlab.bottleneck._sweeps import sweep_step as sweep_step
from layerlab.bottleneck._sweeps import width_masks as width_masks
from layerlab.bottleneck._sweeps import width_sweep as width_sweep
from layerlab.bottleneck._tasks import symmetry_objective as symmetry_objective
from layerlab.bottleneck._tasks import symmetry_task as symmetry_task

Gamma = covariances
Phi = representations
Psi = weights_from_representations

__all__ = [
    "ACTIVATIONS",
    "Covariances",
    "Forces",
    "Gamma",
    "Phi",
    "Psi",
    "augment",
    "bipartite_matrix",
    "bipartite_width_n_network",
    "bottleneck_diagnostics",
    "caratheodory_reduce",
    "centred_weight_counts",
    "complete_bipartite_edges",
    "covariance_loss",
    "covariances",
    "cp_rank_lower_bound",
    "cross_entropy_cost",
    "forces",
    "frank_wolfe_shallow",
    "from_mlp_layer",
    "from_mlp_params",
    "identity_inputs_loss_lower_bound",
    "incidence_matrix",
    "is_triangle_free",
    "jacobian_stats",
    "layer_counts_near_one",
    "layer_singular_values",
    "linear_optimal_covariances",
    "linear_optimal_regulariser",
    "masked_loss",
    "masked_weights",
    "mse_cost",
    "network_fn",
    "neuron_pairs",
    "ntk_trace",
    "plateau_start",
    "polish_step",
    "psd_pinv",
    "rank_sigma_bounds",
    "representation_dims",
    "representation_loss",
    "representation_step",
    "representations",
    "shallow_min_norm_identity_inputs",
    "sweep_step",
    "symmetry_objective",
    "symmetry_task",
    "tikhonov_pinv",
    "to_mlp_params",
    "weight_loss",
    "weight_norm_sq",
    "weights_from_representations",
    "width_masks",
    "width_sweep",
]
