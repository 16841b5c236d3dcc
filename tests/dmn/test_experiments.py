"""Tests for layerlab.dmn.experiments: DMN build + classifier trained by layerlab.loop.fit."""
import jax
import numpy as np

from layerlab.data import load
from layerlab.dmn import DMNConfig
from layerlab.dmn.experiments import train_and_evaluate


def test_dmn_classifier_learns_digits():
    tr, te = load("digits", "train"), load("digits", "test")
    r = train_and_evaluate("d4,m,de10", tr.x, tr.y, te.x, te.y, 10,
                           key=jax.random.key(0), config=DMNConfig(pca="class"), epochs=8,
                           batch_size=64, lr=1e-2, progress=False, eval_every_epoch=True)
    assert r["widths"] == [4]
    assert len(r["curve"]) == 8
    # a linear classifier on 4 PCA filters of 3x3 patches: far above chance (0.1)
    assert r["val_acc"] > 0.85, r["val_acc"]
    assert np.isfinite(r["final_loss"]) and r["final_loss"] < 1.0
