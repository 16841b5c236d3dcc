"""Exact Gauss–Newton in reversible networks.

Buffelli, McGowan, Xu, Cioba, Shiu, Hennequin, Bernacchia, "Exact, Tractable
Gauss-Newton Optimization in Deep Reversible Architectures Reveal Poor
Generalization" (NeurIPS 2024).

Public API: a reversible MLP with fixed random bottlenecks (``revmlp_*``), its exact
Gauss–Newton direction (``gn_direction``, Prop. 4.4) with regularised pseudo-inverses
(App. K), output-space targets for MSE / softmax cross-entropy (Eqs. 5, 19), and training
steps for ``layerlab.loop.fit`` (``gn_step``, ``revmlp_optax_step``).  Samples are rows.
The paper's experiments (configs and ``run_*`` functions returning records) are in
:mod:`layerlab.gnrev.experiments`.
"""
from ._gauss_newton import COMBINE as COMBINE
from ._gauss_newton import PINV_METHODS as PINV_METHODS
from ._gauss_newton import PINV_SOLVERS as PINV_SOLVERS
from ._gauss_newton import GNInfo as GNInfo
from ._gauss_newton import GramFloorWarning as GramFloorWarning
from ._gauss_newton import PinvConfig as PinvConfig
from ._gauss_newton import gn_direction as gn_direction
from ._gauss_newton import gn_residual as gn_residual
from ._gauss_newton import loss_value as loss_value
from ._gauss_newton import output_target as output_target
from ._gauss_newton import pinv_solve as pinv_solve
from ._gauss_newton import regularized_pinv as regularized_pinv
from ._gauss_newton import softmax_newton_target as softmax_newton_target
from ._revmlp import INITS as INITS
from ._revmlp import RevMLPFrozen as RevMLPFrozen
from ._revmlp import check_rank_bounds as check_rank_bounds
from ._revmlp import rank_bounds as rank_bounds
from ._revmlp import readout_init as readout_init
from ._revmlp import revmlp_apply as revmlp_apply
from ._revmlp import revmlp_hidden as revmlp_hidden
from ._revmlp import revmlp_init as revmlp_init
from ._revmlp import revmlp_inverse as revmlp_inverse
from ._steps import gn_step as gn_step
from ._steps import revmlp_logits as revmlp_logits
from ._steps import revmlp_loss as revmlp_loss
from ._steps import revmlp_optax_step as revmlp_optax_step
from ._steps import with_loss_after as with_loss_after

__all__ = [
    "COMBINE",
    "GNInfo",
    "GramFloorWarning",
    "INITS",
    "PINV_METHODS",
    "PINV_SOLVERS",
    "PinvConfig",
    "RevMLPFrozen",
    "check_rank_bounds",
    "gn_direction",
    "gn_residual",
    "gn_step",
    "loss_value",
    "output_target",
    "pinv_solve",
    "rank_bounds",
    "readout_init",
    "regularized_pinv",
    "revmlp_apply",
    "revmlp_hidden",
    "revmlp_init",
    "revmlp_inverse",
    "revmlp_logits",
    "revmlp_loss",
    "revmlp_optax_step",
    "softmax_newton_target",
    "with_loss_after",
]
