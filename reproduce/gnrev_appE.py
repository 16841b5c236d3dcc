"""App. E (Fig. 6) of Buffelli et al. 2024: longer mini-batch training; GN saturates
while even SGD reaches a lower training loss.

The paper runs this on CIFAR-10 (6 blocks, d'=8000, batch 1024): `--paper` sets that scale
(a GPU with CIFAR-10 on it) with fixed rates GN 1.0 per block (the authors' CIFAR-10 rate),
Adam 1e-4, SGD 0.1; the default is a CPU-sized CIFAR-10 run (4096 images, batch 256, d'=512
with the paper's d'=8000 init variance, 6 blocks, 30 epochs) at GN 0.2 per block and SGD 0.01
(a one-epoch sweep at that size; the authors' 1.0 overshoots at batch 256), Adam 1e-4; every
GN step logs the residual certificate.

    python -m reproduce.gnrev_appE                      # CPU-sized CIFAR-10 (minutes)
    python -m reproduce.gnrev_appE --dataset mnist      # MNIST instead (record appE_mnist)
    python -m reproduce.gnrev_appE --paper              # the paper's CIFAR-10 scale (GPU)
"""
from __future__ import annotations

from reproduce import _gnrev


def build_parser():
    return _gnrev.variants_parser("appE", __doc__)


def main(argv=None) -> int:
    return _gnrev.variants_main("appE", __doc__, argv)


if __name__ == "__main__":
    raise SystemExit(main())
