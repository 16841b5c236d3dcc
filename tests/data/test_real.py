"""The genuine datasets in ../shared/data (skipped when absent), checked against the values
published in its README, and the embedded scikit-learn datasets."""

import numpy as np
import pytest

from layerlab import data as D


@pytest.mark.datasets("mnist")
def test_mnist_counts_and_pixels(shared_data):
    tr = D.load("mnist", data_dir=shared_data)
    assert tr.x.shape == (60000, 28, 28, 1) and tr.x.dtype == np.float32
    np.testing.assert_array_equal(
        tr.class_counts(), [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]
    )
    assert tr.x.min() == 0.0 and tr.x.max() == 1.0
    te = D.load("mnist", "test")  # found through $LAYERLAB_DATA
    np.testing.assert_array_equal(
        te.class_counts(), [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]
    )
    # idx round trip against the README's reading recipe
    import gzip

    raw = np.frombuffer(
        gzip.open(shared_data / "mnist" / "t10k-labels-idx1-ubyte.gz").read(), np.uint8, offset=8
    )
    np.testing.assert_array_equal(te.y, raw)


@pytest.mark.datasets("cifar10")
def test_cifar10_known_values(shared_data):
    first = D.load("cifar10", n=10, shuffle=False, data_dir=shared_data)
    np.testing.assert_array_equal(first.y, [6, 9, 9, 4, 1, 1, 2, 7, 8, 3])
    np.testing.assert_array_equal(
        np.round(first.x[0, 0, :3] * 255).astype(int), [[59, 62, 63], [43, 46, 45], [50, 48, 43]]
    )
    assert first.class_names == (
        "airplane",
        "automobile",
        "bird",
        "cat",
        "deer",
        "dog",
        "frog",
        "horse",
        "ship",
        "truck",
    )
    te = D.load("cifar10", "test", data_dir=shared_data)
    assert te.x.shape == (10000, 32, 32, 3)
    np.testing.assert_array_equal(te.y[:10], [3, 8, 8, 0, 6, 6, 1, 6, 3, 1])
    np.testing.assert_array_equal(te.class_counts(), [1000] * 10)
    np.testing.assert_allclose(
        te.x.mean(axis=(0, 1, 2), dtype=np.float64), [0.4942, 0.4851, 0.4504], atol=1e-4
    )
    bal = D.load("cifar10", n=50, balanced=True, seed=0, data_dir=shared_data)
    np.testing.assert_array_equal(bal.class_counts(), [5] * 10)
    D.clear_cache()


@pytest.mark.datasets("winequality")
def test_winequality_real(shared_data):
    al = D.load("winequality", "all", data_dir=shared_data)
    assert al.x.shape == (1599 + 4898, 11) and al.num_classes == 0
    red = D.load("winequality", "all", variant="red", data_dir=shared_data)
    # first row of winequality-red.csv: 7.4;0.7;0;1.9;0.076;11;34;0.9978;3.51;0.56;9.4;5
    np.testing.assert_allclose(
        red.x[0], [7.4, 0.7, 0, 1.9, 0.076, 11, 34, 0.9978, 3.51, 0.56, 9.4], rtol=1e-6
    )
    assert red.y[0] == 5.0 and red.y.min() == 3 and red.y.max() == 8
    tr, te = (D.load("winequality", s, data_dir=shared_data) for s in ("train", "test"))
    assert len(tr) + len(te) == len(al) and len(te) == 1599 // 5 + 4898 // 5


@pytest.mark.datasets("mnist")
def test_dgl_protocol_bmnist(shared_data):
    s = D.dgl_protocol("BMNIST2k", n_train=200, data_dir=shared_data)
    np.testing.assert_array_equal(s.train.class_counts(), [100, 100])
    np.testing.assert_array_equal(s.val.class_counts(), [100, 100])
    assert s.train.class_names == ("1", "7")
    assert not {r.tobytes() for r in s.train.x} & {r.tobytes() for r in s.val.x}
    assert len(s.test) == 1135 + 1028  # official test images of digits 1 and 7
    with pytest.raises(ValueError, match="Unknown DGL protocol"):
        D.dgl_protocol("MNIST5k")


def test_digits_and_wine_embedded():
    from sklearn.datasets import load_digits, load_wine

    al = D.load("digits", "all")
    ref = load_digits()
    assert al.x.shape == (1797, 8, 8, 1)
    np.testing.assert_allclose(al.x.reshape(1797, 64), ref.data / 16, rtol=1e-6)
    tr, te = D.load("digits"), D.load("digits", "test")
    assert len(tr) == 1438 and len(te) == 359
    np.testing.assert_array_equal(te.y, ref.target[np.arange(1797) % 5 == 4])
    b = D.load("digits", classes=(1, 7))
    assert b.num_classes == 2 and set(b.y) == {0, 1}
    np.testing.assert_array_equal(b.class_counts(), [(tr.y == 1).sum(), (tr.y == 7).sum()])
    np.testing.assert_array_equal(b.x, tr.x[(tr.y == 1) | (tr.y == 7)])
    w = D.load("wine", "all")
    np.testing.assert_allclose(w.x, load_wine().data, rtol=1e-6)
    # the every-5th-sample test split is stratified for the class-sorted wine file
    # classes 0..58, 59..129, 130..177 -> every 5th index: 11, 15, 9 test samples
    np.testing.assert_array_equal(D.load("wine", "test").class_counts(), [11, 15, 9])
    sub = D.load("digits", n=100, balanced=True, seed=3)
    np.testing.assert_array_equal(sub.class_counts(), [10] * 10)
