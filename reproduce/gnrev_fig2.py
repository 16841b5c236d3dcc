"""Fig. 2 of Buffelli et al. 2024: mini-batch training loss, test loss and test accuracy,
exact GN vs Adam vs SGD on a RevMLP (§5.2).

Figs. 2, 3, 4 and Apps. G, H are views of ONE mini-batch run per optimizer
(`layerlab.gnrev.experiments.run_minibatch`), cached under the configuration's fingerprint, so
running the five scripts in a row trains once.  Learning rates: one-epoch vmapped sweeps
(largest progress without instability, §5.2); GN in the authors' per-block convention; 'gn' =
exact regime (ReLU in every block), 'gn_first_linear' = the authors' code (inexact at batch
1024); every GN step logs the residual certificate ‖JΔθ−ε‖/‖ε‖.

    python -m reproduce.gnrev_fig2                    # reduced CPU config (MNIST 8192, d'=1024)
    python -m reproduce.gnrev_fig2 --paper            # full MNIST, batch 1024, d'=8000, 3 seeds
    python -m reproduce.gnrev_fig2 --dataset cifar10  # CIFAR-10, 6 blocks, 10240 imgs (CPU)
"""
from __future__ import annotations

from reproduce import _gnrev


def build_parser():
    return _gnrev.minibatch_parser("fig2", __doc__)


def main(argv=None) -> int:
    return _gnrev.minibatch_main("fig2", __doc__, argv)


if __name__ == "__main__":
    raise SystemExit(main())
