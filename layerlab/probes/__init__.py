r"""Probes: jit-able measurements of representations, kernels and parameters.

All functions are pure ``jnp`` code (no hidden ``jit``; jit or vmap them at the call site)
and validate shapes, which are static under ``jit``.

Representation similarity (Kornblith et al. 2019; Nguyen et al. 2021):
  :func:`linear_cka`, :func:`rbf_cka`, :func:`cka` (from Gram matrices), :func:`hsic`,
  :func:`unbiased_hsic`, :func:`minibatch_cka` and its streaming form
  (:func:`minibatch_cka_init` / :func:`minibatch_cka_update` / :func:`minibatch_cka_value`).
Kernels: :func:`gram_linear`, :func:`gram_rbf`, :func:`center_gram`,
  :func:`kernel_alignment`, :func:`kernel_distance`, :func:`kernel_change_rate`.
Spectra: :func:`singular_values`, :func:`product_singular_values`, :func:`effective_rank`,
  :func:`stable_rank`, :func:`participation_ratio`, :func:`count_near_one`.
Classification: :func:`accuracy` (scores ``[N, C]`` against labels ``[N]`` or one-hot rows).
Parameter pytrees: :func:`tree_cosine_similarity`, :func:`tree_relative_change` (for the
  norm of a pytree use ``optax.tree.norm``).
"""

from layerlab.probes._accuracy import accuracy as accuracy
from layerlab.probes._cka import MinibatchCKAState as MinibatchCKAState
from layerlab.probes._cka import center_gram as center_gram
from layerlab.probes._cka import cka as cka
from layerlab.probes._cka import gram_linear as gram_linear
from layerlab.probes._cka import gram_rbf as gram_rbf
from layerlab.probes._cka import hsic as hsic
from layerlab.probes._cka import kernel_alignment as kernel_alignment
from layerlab.probes._cka import kernel_change_rate as kernel_change_rate
from layerlab.probes._cka import kernel_distance as kernel_distance
from layerlab.probes._cka import linear_cka as linear_cka
from layerlab.probes._cka import minibatch_cka as minibatch_cka
from layerlab.probes._cka import minibatch_cka_init as minibatch_cka_init
from layerlab.probes._cka import minibatch_cka_update as minibatch_cka_update
from layerlab.probes._cka import minibatch_cka_value as minibatch_cka_value
from layerlab.probes._cka import rbf_cka as rbf_cka
from layerlab.probes._cka import unbiased_hsic as unbiased_hsic
from layerlab.probes._spectra import count_near_one as count_near_one
from layerlab.probes._spectra import effective_rank as effective_rank
from layerlab.probes._spectra import participation_ratio as participation_ratio
from layerlab.probes._spectra import product_singular_values as product_singular_values
from layerlab.probes._spectra import singular_values as singular_values
from layerlab.probes._spectra import stable_rank as stable_rank
from layerlab.probes._trees import tree_cosine_similarity as tree_cosine_similarity
from layerlab.probes._trees import tree_relative_change as tree_relative_change

__all__ = [
    "gram_linear",
    "gram_rbf",
    "center_gram",
    "hsic",
    "unbiased_hsic",
    "cka",
    "linear_cka",
    "rbf_cka",
    "minibatch_cka",
    "MinibatchCKAState",
    "minibatch_cka_init",
    "minibatch_cka_update",
    "minibatch_cka_value",
    "kernel_alignment",
    "kernel_change_rate",
    "kernel_distance",
    "singular_values",
    "product_singular_values",
    "effective_rank",
    "stable_rank",
    "participation_ratio",
    "count_near_one",
    "tree_cosine_similarity",
    "tree_relative_change",
    "accuracy",
]
