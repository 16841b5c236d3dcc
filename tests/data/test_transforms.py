"""Tests for layerlab.data._transforms (and the Dataset container)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from layerlab import data as D


def _toy(n_per_class=(30, 20, 25), d=3):
    """A classification dataset whose x[:, 0] is the sample id (to check disjointness)."""
    y = np.concatenate([np.full(k, c, np.int32) for c, k in enumerate(n_per_class)])
    y = y[np.random.default_rng(0).permutation(len(y))]
    x = np.zeros((len(y), d), np.float32)
    x[:, 0] = np.arange(len(y))
    x[:, 1] = y
    return D.Dataset(x, y, len(n_per_class), "toy", "train", ("a", "b", "c"))


def test_flatten_and_l2_normalize():
    x = np.arange(24, dtype=np.float32).reshape(2, 2, 3, 2)
    f = D.flatten(x)
    assert f.shape == (2, 12)
    np.testing.assert_array_equal(f[1], np.arange(12, 24))
    u = D.l2_normalize(f, radius=2.0)
    np.testing.assert_allclose(np.linalg.norm(u, axis=1), [2.0, 2.0], rtol=1e-6)
    np.testing.assert_allclose(u[1] / np.linalg.norm(u[1]), f[1] / np.linalg.norm(f[1]), rtol=1e-6)
    assert isinstance(D.flatten(jnp.asarray(x)), jax.Array)


def test_standardize_reuses_train_statistics():
    rng = np.random.default_rng(0)
    xtr = rng.normal(3.0, 2.0, size=(200, 4)).astype(np.float32)
    xtr[:, 3] = 7.0  # constant feature: only centred
    xs, mu, sd = D.standardize(xtr)
    np.testing.assert_allclose(xs[:, :3].mean(0), 0.0, atol=1e-5)
    np.testing.assert_allclose(xs[:, :3].std(0), 1.0, rtol=1e-5)
    np.testing.assert_array_equal(xs[:, 3], 0.0)
    xte = rng.normal(size=(5, 4)).astype(np.float32)
    xte_s, _, _ = D.standardize(xte, mu, sd)
    np.testing.assert_allclose(
        xte_s, (xte - xtr.mean(0)) / np.where(xtr.std(0) > 0, xtr.std(0), 1), rtol=1e-5
    )
    with pytest.raises(ValueError, match="both"):
        D.standardize(xte, mu)
    with pytest.raises(ValueError, match="do not match"):
        D.standardize(xte[:, :3], mu, sd)
    # jax path gives the same numbers
    js, jm, _ = D.standardize(jnp.asarray(xtr))
    np.testing.assert_allclose(np.asarray(js), xs, atol=1e-5)


def test_scale_min_max():
    x = np.array([[0.0, 10.0], [5.0, 10.0], [10.0, 10.0]], np.float32)
    s, lo, hi = D.scale(x, low=-1.0, high=1.0)
    np.testing.assert_allclose(s[:, 0], [-1.0, 0.0, 1.0])
    np.testing.assert_allclose(s[:, 1], [-1.0, -1.0, -1.0])  # constant feature -> low
    s2, _, _ = D.scale(np.array([[20.0, 10.0]], np.float32), low=-1.0, high=1.0, x_min=lo, x_max=hi)
    np.testing.assert_allclose(s2, [[3.0, -1.0]])


def test_one_hot_plain_and_zero_mean():
    y = np.array([2, 0, 1, 2])
    t = D.one_hot(y, 3)
    np.testing.assert_array_equal(t, np.eye(3)[y])
    assert t.dtype == np.float32
    z = D.one_hot(y, 3, zero_mean=True)
    np.testing.assert_allclose(z, np.eye(3)[y] - 1 / 3, rtol=1e-6)
    np.testing.assert_allclose(z.sum(1), 0.0, atol=1e-6)
    np.testing.assert_allclose(
        np.asarray(jax.jit(D.one_hot, static_argnums=1)(jnp.asarray(y), 3)), t
    )
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
        D.one_hot(np.array([0, 3]), 3)
    with pytest.raises(TypeError, match="integer"):
        D.one_hot(np.array([0.0, 1.0]), 3)


def test_per_class_counts():
    np.testing.assert_array_equal(D.per_class_counts(10, 3), [4, 3, 3])
    np.testing.assert_array_equal(D.per_class_counts(9, 3), [3, 3, 3])


def test_balanced_subset_is_balanced_deterministic_and_faithful():
    ds = _toy()
    sub = D.balanced_subset(ds, 30, seed=1)
    np.testing.assert_array_equal(sub.class_counts(), [10, 10, 10])
    ids = sub.x[:, 0].astype(int)
    assert len(set(ids)) == 30 and np.all(np.diff(ids) > 0)  # distinct, original order
    np.testing.assert_array_equal(sub.y, ds.y[ids])  # rows kept intact
    again = D.balanced_subset(ds, 30, seed=1)
    np.testing.assert_array_equal(again.x, sub.x)
    other = D.balanced_subset(ds, 30, seed=2)
    assert not np.array_equal(other.x, sub.x)
    with pytest.raises(ValueError, match="class 'b'.*only 20"):
        D.balanced_subset(ds, 63, seed=0)
    # a jax key works as the seed, deterministically
    kx = D.balanced_subset(ds, 30, seed=jax.random.key(5))
    np.testing.assert_array_equal(kx.x, D.balanced_subset(ds, 30, seed=jax.random.key(5)).x)
    assert not np.array_equal(kx.x, D.balanced_subset(ds, 30, seed=jax.random.key(6)).x)


def test_train_val_split_disjoint_balanced():
    ds = _toy()
    tr, va = D.train_val_split(ds, 30, 15, seed=3)
    np.testing.assert_array_equal(tr.class_counts(), [10, 10, 10])
    np.testing.assert_array_equal(va.class_counts(), [5, 5, 5])
    assert not set(tr.x[:, 0]) & set(va.x[:, 0])
    assert (tr.split, va.split) == ("train", "val")
    tr2, va2 = D.train_val_split(ds, 40, 30, balanced=False, seed=3)
    assert len(tr2) == 40 and len(va2) == 30 and not set(tr2.x[:, 0]) & set(va2.x[:, 0])
    with pytest.raises(ValueError, match="only 20"):
        D.train_val_split(ds, 30, 33)


def test_select_classes_relabels():
    ds = _toy()
    sub = D.select_classes(ds, (2, 0))
    assert sub.num_classes == 2 and sub.class_names == ("c", "a")
    orig = sub.x[:, 1]  # original label stored in the features
    np.testing.assert_array_equal(sub.y, np.where(orig == 2, 0, 1))
    assert len(sub) == 25 + 30
    by_name = D.select_classes(ds, ("c", "a"))
    np.testing.assert_array_equal(by_name.y, sub.y)
    keep = D.select_classes(ds, (1,), relabel=False)
    assert keep.num_classes == 3 and set(keep.y) == {1}
    with pytest.raises(ValueError, match="out of range"):
        D.select_classes(ds, (5,))


def test_dataset_container():
    ds = _toy()
    assert len(ds) == 75 and ds.input_shape == (3,)
    assert ds.take(5).x.shape == (5, 3)
    np.testing.assert_array_equal(ds.subset([3, 1]).y, ds.y[[3, 1]])
    with pytest.raises(ValueError, match="same leading"):
        D.Dataset(np.zeros((3, 2)), np.zeros(4))
    with pytest.raises(dataclasses_frozen_error()):
        ds.x = None
    # a pytree: x and y are leaves, metadata static
    leaves = jax.tree.leaves(ds)
    assert len(leaves) == 2
    doubled = jax.tree.map(lambda a: a * 2, ds)
    assert doubled.name == "toy" and doubled.num_classes == 3
    np.testing.assert_array_equal(doubled.y, 2 * ds.y)
    # through jit: metadata is static, arrays are traced
    total = jax.jit(lambda d: d.x[:, 0].sum() * d.num_classes)(ds)
    np.testing.assert_allclose(float(total), 3 * ds.x[:, 0].sum())


def dataclasses_frozen_error():
    import dataclasses

    return dataclasses.FrozenInstanceError


def _brute_patches(x, k, stride, padding):
    n, h, w, c = x.shape
    if padding == "SAME":
        ho, wo = -(-h // stride), -(-w // stride)
        ph = max((ho - 1) * stride + k - h, 0)
        pw = max((wo - 1) * stride + k - w, 0)
        x = np.pad(x, ((0, 0), (ph // 2, ph - ph // 2), (pw // 2, pw - pw // 2), (0, 0)))
    else:
        ho, wo = (h - k) // stride + 1, (w - k) // stride + 1
    out = np.zeros((n, ho, wo, k * k * c), x.dtype)
    for b in range(n):
        for i in range(ho):
            for j in range(wo):
                f = 0
                for a in range(k):
                    for bb in range(k):
                        for ch in range(c):
                            out[b, i, j, f] = x[b, i * stride + a, j * stride + bb, ch]
                            f += 1
    return out


@pytest.mark.parametrize(
    "k,stride,padding", [(3, 1, "VALID"), (3, 2, "SAME"), (2, 2, "VALID"), (4, 3, "SAME")]
)
def test_extract_patches_matches_brute_force(k, stride, padding):
    x = np.random.default_rng(0).normal(size=(2, 7, 6, 2)).astype(np.float32)
    got = D.extract_patches(x, k, stride=stride, padding=padding)
    np.testing.assert_array_equal(got, _brute_patches(x, k, stride, padding))


def test_extract_patches_is_a_convolution():
    """patches @ w.reshape(-1, O) == lax.conv with the HWIO kernel w (independent route)."""
    rng = np.random.default_rng(1)
    x = jnp.asarray(rng.normal(size=(2, 8, 8, 3)), jnp.float32)
    w = jnp.asarray(rng.normal(size=(3, 3, 3, 5)), jnp.float32)
    for stride, padding in [(1, "SAME"), (2, "VALID")]:
        p = D.extract_patches(x, 3, stride=stride, padding=padding)
        conv = jax.lax.conv_general_dilated(
            x, w, (stride, stride), padding, dimension_numbers=("NHWC", "HWIO", "NHWC")
        )
        np.testing.assert_allclose(
            np.asarray(p @ w.reshape(-1, 5)), np.asarray(conv), rtol=1e-4, atol=1e-4
        )
    with pytest.raises(ValueError, match=r"\[N, H, W, C\]"):
        D.extract_patches(np.zeros((8, 8, 3)), 3)
    with pytest.raises(ValueError, match="do not fit"):
        D.extract_patches(np.zeros((1, 2, 2, 1)), 3)


def test_load_refuses_integer_dtype_and_unbalanceable_n():
    from layerlab import data

    with pytest.raises(ValueError, match="load: dtype must be a float dtype"):
        data.load("digits", dtype=np.uint8)
    with pytest.raises(ValueError, match="n = 5 is below the 10 classes"):
        data.load("digits", n=5, balanced=True)
    assert len(data.load("digits", n=5, balanced=False, seed=0).y) == 5
    assert data.load("digits", n=20, dtype=jnp.bfloat16).x.dtype == jnp.bfloat16  # a float


def test_float_transforms_of_integer_arrays_return_floats():
    """standardize / scale / l2_normalize cast their result back to an integer input's dtype
    (uint8 standardized to 0/1/255, scaled to 0, normalised rows of 4, 11, ...) and l2_normalize
    squared uint8 in uint8; the reference is the float64 formula."""
    rng = np.random.default_rng(0)
    u = rng.integers(0, 256, (10, 4)).astype(np.uint8)
    f = u.astype(np.float64)
    xs, mu, sd = D.standardize(u)
    assert xs.dtype == np.float32
    np.testing.assert_allclose(xs, (f - f.mean(0)) / f.std(0), rtol=1e-5, atol=1e-6)
    s, lo, hi = D.scale(u[:5])
    assert s.dtype == np.float32
    np.testing.assert_allclose(s, (f[:5] - f[:5].min(0)) / (f[:5].max(0) - f[:5].min(0)),
                               rtol=1e-6)
    # the training statistics on other data: values below x_min go negative, not wrap around
    s2, _, _ = D.scale(u[5:], x_min=u[:5].min(0), x_max=u[:5].max(0))
    np.testing.assert_allclose(s2, (f[5:] - f[:5].min(0)) / (f[:5].max(0) - f[:5].min(0)),
                               rtol=1e-6)
    assert s2.min() < 0
    unit = f / np.linalg.norm(f, axis=1, keepdims=True)
    for arr in (u, jnp.asarray(u)):
        got = D.l2_normalize(arr)
        assert got.dtype == np.float32
        np.testing.assert_allclose(np.asarray(got), unit, rtol=1e-6)
    assert D.standardize(u.astype(np.int64))[0].dtype == np.float64  # np.result_type rule
    assert D.scale(u.astype(np.float64))[0].dtype == np.float64


def test_train_val_split_balanced_below_the_class_count_raises():
    """n_train = 5 over 10 digit classes gave a silently unbalanced split ([1]*5 + [0]*5)."""
    ds = _toy()  # 3 classes
    with pytest.raises(ValueError, match=r"^train_val_split: n_train = 2 is below the 3 "
                                         r"classes, so no split of it is label-balanced"):
        D.train_val_split(ds, 2, 6)
    with pytest.raises(ValueError, match=r"^train_val_split: n_val = 1 is below the 3 classes"):
        D.train_val_split(ds, 6, 1)
    tr, va = D.train_val_split(ds, 3, 0)  # one per class; an empty val split is fine
    np.testing.assert_array_equal(tr.class_counts(), [1, 1, 1])
    assert len(va) == 0
    assert len(D.train_val_split(ds, 2, 1, balanced=False)[0]) == 2


def test_select_classes_refuses_non_integer_labels():
    """classes=(1.7, 3) silently selected classes 1 and 3."""
    ds = _toy()
    with pytest.raises(TypeError, match=r"^select_classes: classes must hold integer labels or "
                                        r"class names, got 1\.7 \(float\) in \(1\.7, 2\)\.$"):
        D.select_classes(ds, (1.7, 2))
    with pytest.raises(TypeError, match="got True"):
        D.select_classes(ds, (True, 2))
    sub = D.select_classes(ds, (np.int64(2), jnp.asarray(0)))  # numpy / 0-d jax integers
    np.testing.assert_array_equal(sub.y, D.select_classes(ds, (2, 0)).y)


@pytest.mark.parametrize(("call", "err", "msg"), [
    (lambda: D.dgl_protocol("BMNIST2k", n_train=20.0), TypeError,
     r"^dgl_protocol: n_train must be an integer, got float 20\.0"),
    (lambda: D.dgl_protocol("BMNIST2k", n_train="20"), TypeError,
     r"^dgl_protocol: n_train must be an integer, got a string '20'"),
    (lambda: D.dgl_protocol("BMNIST2k", n_train=-2), ValueError,
     r"^dgl_protocol: n_train must be >= 1, got -2"),
    (lambda: D.dgl_protocol("BMNIST2k", n_train=20, n_val=2.5), TypeError,
     r"^dgl_protocol: n_val must be an integer, got float 2\.5"),
    (lambda: D.dgl_protocol("BMNIST2k", seed=1.5), TypeError,
     r"^dgl_protocol: seed must be an integer, got float 1\.5"),
    (lambda: D.dgl_protocol(None), TypeError, r"^dgl_protocol: name must be a protocol name"),
    (lambda: D.load("digits", n=10, seed=-1), ValueError, r"^load: seed must be >= 0, got -1"),
    (lambda: D.load("digits", n=10, seed=1.5), TypeError,
     r"^load: seed must be an integer, got float 1\.5"),
    (lambda: D.load("digits", n=10, seed="a"), TypeError,
     r"^load: seed must be an integer, got a string 'a'"),
    (lambda: D.load(None), TypeError,
     r"^load: name must be a dataset name \(a string\), one of digits, .*; got None"),
    (lambda: D.train_val_split(_toy(), "6", 3), TypeError,
     r"^train_val_split: n_train must be an integer, got a string '6'"),
    (lambda: D.random_subset(_toy(), 5, seed=-3), ValueError,
     r"^random_subset: seed must be >= 0, got -3"),
])
def test_bad_sizes_seeds_and_names_are_refused_naming_the_argument(call, err, msg):
    """They gave numpy's / Python's errors without the argument (``SeedSequence expects int``,
    ``slice indices must be integers``, ``'<' not supported``, ``'NoneType' object has no
    attribute 'lower'``); the size checks run before any file is read."""
    with pytest.raises(err, match=msg):
        call()


def test_seeds_of_every_accepted_kind_still_draw_subsets():
    ref = D.load("digits", n=10, seed=3)
    for seed in (np.int64(3), jnp.asarray(3), np.uint8(3)):
        np.testing.assert_array_equal(D.load("digits", n=10, seed=seed).y, ref.y)
    for seed in (jax.random.key(3), jax.random.PRNGKey(3), np.array([1, 2], np.uint32)):
        assert len(D.load("digits", n=10, seed=seed).y) == 10


@pytest.mark.parametrize("call,err,msg", [
    (lambda ds: D.holdout_mask(2.5), TypeError, "holdout_mask: n must be an integer, got float"),
    (lambda ds: D.holdout_mask(-3), ValueError, "holdout_mask: n must be >= 0, got -3"),
    (lambda ds: D.random_subset(ds, 2.5), TypeError, "random_subset: n must be an integer"),
    (lambda ds: D.random_subset(ds, 2.0), TypeError, "random_subset: n must be an integer"),
    (lambda ds: D.balanced_subset(ds, 25.9), TypeError, "balanced_subset: n must be an int"),
    (lambda ds: D.balanced_subset(ds, True), TypeError, "balanced_subset: n must be an int"),
    (lambda ds: D.per_class_counts(2.5, 10), TypeError, "per_class_counts: n must be an int"),
    (lambda ds: D.per_class_counts(5, 2.0), TypeError,
     "per_class_counts: num_classes must be an integer"),
    (lambda ds: ds.take(2.5), TypeError, "Dataset.take: n must be an integer"),
    (lambda ds: D.select_classes(ds, 1), TypeError,
     r"select_classes: classes must be a sequence of class labels or names, e\.g\. \(1, 7\); "
     r"got int 1 \(for a single class pass \(1,\)\)"),
    (lambda ds: D.select_classes(ds, "ab"), TypeError, "got str 'ab'"),
    (lambda ds: D.load("digits", classes=7), TypeError, "load: classes must be a sequence"),
    (lambda ds: D.load("digits", classes="17"), TypeError, "load: classes must be a sequence"),
    (lambda ds: D.random_subset(ds, 5, jnp.array([0.3, 0.9])), TypeError,
     r"random_subset: seed must be .* got an array of dtype float32"),
    (lambda ds: D.load("digits", n=5, seed=np.array([0.3, 0.9])), TypeError,
     "load: seed must be .* dtype float64"),
    (lambda ds: D.load("digits", n=5, seed=np.array([2, -1])), ValueError,
     "load: seed must hold non-negative integers"),
])
def test_sizes_classes_and_array_seeds_are_checked_naming_the_argument(call, err, msg):
    """holdout_mask(2.5) / (-3) were accepted; a float n failed deep in a slice ("slice
    indices must be integers") naming no argument; classes=7 gave "'int' object is not
    iterable" and classes="17" was read as ('1', '7'); a float array seed was truncated."""
    with pytest.raises(err, match=msg):
        call(_toy())
