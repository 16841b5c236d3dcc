"""Compact copy of the finished sweeps / (arm, seed) runs kept under the checkpoint folder:
grams -> linear CKA with init per block and epoch, NTK -> cos with init; the rest as is.

    python3 tools/device/partial.py CHECKPOINT_DIR OUT.pkl
"""

import glob
import pickle
import sys

import numpy as np

out = {}
for f in sorted(glob.glob(f"{sys.argv[1]}/done_*/*.pkl")):
    try:
        with open(f, "rb") as fh:
            r = pickle.load(fh)
    except Exception as e:
        out[f] = repr(e)
        continue

    if isinstance(r, dict) and "grams" in r:
        # Linear CKA of the centred Gram matrices H G H (H = I - 1/m) with those at init.
        g = np.asarray(r.pop("grams"), np.float64)  # [E+1, L, m, m]
        m = g.shape[-1]
        H = np.eye(m) - 1.0 / m
        gc = H @ g @ H
        num = np.einsum("lij,elij->el", gc[0], gc)  # <Gc_0, Gc_e>_F, [E+1, L]
        norm0 = np.linalg.norm(gc[0], axis=(-2, -1))[None]  # [1, L]
        norm = np.linalg.norm(gc, axis=(-2, -1))  # [E+1, L]
        r["cka_init"] = num / (norm0 * norm)

    if isinstance(r, dict) and "ntk" in r:
        # Cosine (Frobenius) of each epoch's NTK with the NTK at init.
        K = np.asarray(r.pop("ntk"), np.float64)  # [E+1, n, n]
        num = np.einsum("ij,eij->e", K[0], K)
        r["ntk_cos_init"] = num / (np.linalg.norm(K[0]) * np.linalg.norm(K, axis=(1, 2)))

    out[f.split("/")[-1]] = r

with open(sys.argv[2], "wb") as fh:
    pickle.dump(out, fh)
print("partial:", list(out))
