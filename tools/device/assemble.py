"""Rebuild cifar10.npz on the device from 12 lossless WebP mosaics (5000 images each) + labels.

    python3 tools/device/assemble.py SRC_DIR DATA_DIR SHA256

reads SRC_DIR/m*.webp and SRC_DIR/labels.npz (from ``encode_cifar10.py``), checks the images'
sha256 against SHA256 and writes DATA_DIR/cifar10/cifar10.npz.
"""

import glob
import hashlib
import os
import sys

import numpy as np
from PIL import Image


def unpack(path):
    """Cut one mosaic (50 x 100 tiles of 32 x 32) back into its 5000 images, [5000, 32, 32, 3]."""
    mosaic = np.asarray(Image.open(path).convert("RGB"))
    tiles = mosaic.reshape(50, 32, 100, 32, 3).transpose(0, 2, 1, 3, 4)
    return tiles.reshape(5000, 32, 32, 3)


src, dst, want = sys.argv[1], sys.argv[2], sys.argv[3]
fs = sorted(glob.glob(f"{src}/m*.webp"))
if len(fs) != 12:
    sys.exit(f"assemble: expected 12 mosaics in {src}, found {len(fs)}: {fs}")

X = np.concatenate([unpack(f) for f in fs])
got = hashlib.sha256(X.tobytes()).hexdigest()
if got != want:
    sys.exit(f"assemble: sha256 {got} != {want}")

lab = np.load(f"{src}/labels.npz")
os.makedirs(f"{dst}/cifar10", exist_ok=True)
np.savez(
    f"{dst}/cifar10/cifar10.npz",
    x_train=X[:50000],
    y_train=lab["y_train"],
    x_test=X[50000:],
    y_test=lab["y_test"],
    label_names=lab["label_names"],
)
print("assemble: ok", X.shape, got[:12])
