"""L2-regularised DNNs: reformulations, attraction/repulsion, bottleneck structure.

(A) Jacot, Golikov, Hongler, Gabriel, "Feature Learning in L2-regularized DNNs:
Attraction/Repulsion and Sparsity" (NeurIPS 2022).
(B) Jacot, "Bottleneck Structure in Learned Features: Low-Dimension vs Regularity
Tradeoff" (NeurIPS 2023).

Convention (paper A): columns are data points, ``X`` is ``[n_0, N]``, ``Z_l`` is ``[n_l, N]`` and
``W_l`` is ``[n_l, n_{l-1} + 1]`` with the last column multiplying the bias row ``beta 1^T``.
"""
from layerlab.bottleneck._reformulations import Covariances as Covariances
from layerlab.bottleneck._reformulations import Forces as Forces
from layerlab.bottleneck._reformulations import augment as augment
from layerlab.bottleneck._reformulations import caratheodory_reduce as caratheodory_reduce
from layerlab.bottleneck._reformulations import covariance_loss as covariance_loss
from layerlab.bottleneck._reformulations import covariances as covariances
from layerlab.bottleneck._reformulations import forces as forces
from layerlab.bottleneck._reformulations import (
    linear_optimal_covariances as linear_optimal_covariances,
)
from layerlab.bottleneck._reformulations import (
    linear_optimal_regulariser as linear_optimal_regulariser,
)
from layerlab.bottleneck._reformulations import neuron_pairs as neuron_pairs
from layerlab.bottleneck._reformulations import psd_pinv as psd_pinv
from layerlab.bottleneck._reformulations import rank_sigma_bounds as rank_sigma_bounds
from layerlab.bottleneck._reformulations import representation_loss as representation_loss
from layerlab.bottleneck._reformulations import representations as representations
from layerlab.bottleneck._reformulations import tikhonov_pinv as tikhonov_pinv
from layerlab.bottleneck._reformulations import weight_loss as weight_loss
from layerlab.bottleneck._reformulations import (
    weights_from_representations as weights_from_representations,
)

Gamma = covariances
Phi = representations
Psi = weights_from_representations

__all__ = [
    "Covariances",
    "Forces",
    "Gamma",
    "Phi",
    "Psi",
    "augment",
    "caratheodory_reduce",
    "covariance_loss",
    "covariances",
    "forces",
    "linear_optimal_covariances",
    "linear_optimal_regulariser",
    "neuron_pairs",
    "psd_pinv",
    "rank_sigma_bounds",
    "representation_loss",
    "representations",
    "tikhonov_pinv",
    "weight_loss",
    "weights_from_representations",
]
