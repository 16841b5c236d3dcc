"""App. J (Fig. 13) of Buffelli et al. 2024: GN with weight decay.

The paper runs this on CIFAR-10 (6 blocks, d'=8000, batch 1024): `--paper` sets that scale
(a GPU with CIFAR-10 on it); the default is a CPU-sized CIFAR-10 run (4096 images, batch 256,
d'=256, 6 blocks).  Fixed rates: GN 1.0 per block (the authors' CIFAR-10 rate), Adam 1e-4,
SGD 0.1; every GN step logs the residual certificate.

    python -m reproduce.gnrev_appJ                      # CPU-sized CIFAR-10 (minutes)
    python -m reproduce.gnrev_appJ --dataset mnist      # MNIST instead (record )
    python -m reproduce.gnrev_appJ --paper              # the paper's CIFAR-10 scale (GPU)
"""
from __future__ import annotations

from reproduce import _gnrev


def build_parser():
    return _gnrev.variants_parser("appJ", __doc__)


def main(argv=None) -> int:
    return _gnrev.variants_main("appJ", __doc__, argv)


if __name__ == "__main__":
    raise SystemExit(main())
