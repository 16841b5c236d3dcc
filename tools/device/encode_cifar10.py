"""Pack CIFAR-10 for a lent GPU: the device tool carries 64 MiB a call with the working tree, and
cifar10.npz is 162 MB, so the 60 000 images go as 12 lossless WebP mosaics (5000 images, 50 x 100
tiles of 32 x 32 each, ~8.5 MB; 0.556 of the raw bytes) over two calls, with the labels.
``assemble.py`` rebuilds the npz there and checks the images' sha256.

    python tools/device/encode_cifar10.py DATA_DIR OUT_DIR      # OUT_DIR/m00..m11.webp, labels.npz
"""

import hashlib
import sys
from concurrent.futures import ProcessPoolExecutor

import numpy as np
from PIL import Image

SRC, DST = sys.argv[1], sys.argv[2]


def enc(i):
    """Write and verify mosaic i (images i * 5000 .. (i + 1) * 5000 of train + test)."""
    z = np.load(f"{SRC}/cifar10/cifar10.npz")
    X = np.concatenate([z["x_train"], z["x_test"]])[i * 5000:(i + 1) * 5000]
    m = X.reshape(50, 100, 32, 32, 3).transpose(0, 2, 1, 3, 4).reshape(1600, 3200, 3)
    Image.fromarray(m).save(f"{DST}/m{i:02d}.webp", "WEBP", lossless=True, quality=100, method=6)
    assert np.array_equal(np.asarray(Image.open(f"{DST}/m{i:02d}.webp").convert("RGB")), m)
    return i


if __name__ == "__main__":
    z = np.load(f"{SRC}/cifar10/cifar10.npz")
    np.savez(f"{DST}/labels.npz", y_train=z["y_train"], y_test=z["y_test"],
             label_names=z["label_names"])
    X = np.concatenate([z["x_train"], z["x_test"]])
    print("sha256 of the images (assemble.py's third argument):",
          hashlib.sha256(X.tobytes()).hexdigest())
    with ProcessPoolExecutor(2) as ex:
        for i in ex.map(enc, range(12)):
            print(i, flush=True)
