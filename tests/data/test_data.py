"""Public-split generators and the offline digits data set."""
import json

import numpy as np
import pytest

from conftest import rng
from fresh_python import fresh_python
from pazo.data.digits import digits_arrays, load_digits_bundle
from pazo.data.public_split import imbalanced_class_counts, split_public, stratified_holdout

LABELS = np.repeat(np.arange(10), 100)


def test_fraction_split_is_disjoint_complete_and_sized():
    pub, priv = split_public(LABELS, rng(0), fraction=0.04)
    assert len(pub) == 40 and len(set(pub) & set(priv)) == 0
    assert sorted(np.concatenate([pub, priv])) == list(range(1000))
    assert np.bincount(LABELS[pub], minlength=10).tolist() == [4] * 10  # balanced by default


def test_per_class_split():
    pub, _ = split_public(LABELS, rng(0), per_class=20)
    assert np.bincount(LABELS[pub]).tolist() == [20] * 10


def test_seeding_gives_identical_splits_and_other_seeds_differ():
    a = split_public(LABELS, rng(5), fraction=0.1, imbalance=0.5)[0]
    b = split_public(LABELS, rng(5), fraction=0.1, imbalance=0.5)[0]
    c = split_public(LABELS, rng(6), fraction=0.1, imbalance=0.5)[0]
    assert np.array_equal(a, b) and not np.array_equal(a, c)


@pytest.mark.parametrize("imbalance", [0.0, 0.5, 0.9])
def test_imbalance_matches_its_parameter(imbalance):
    counts = imbalanced_class_counts(10000, np.full(10, 10000), imbalance, rng(0))
    assert counts.sum() == 10000
    assert counts.min() / counts.max() == pytest.approx(1 - imbalance, abs=0.01)


def test_imbalance_is_capped_by_availability():
    counts = imbalanced_class_counts(100, np.array([5, 100, 100]), 0.0, rng(0))
    assert counts[0] == 5 and (counts <= [5, 100, 100]).all()


def test_stratified_holdout():
    kept, held = stratified_holdout(LABELS, 0.2, rng(0))
    assert np.bincount(LABELS[held]).tolist() == [20] * 10 and len(kept) == 800


def test_digits_bundle_sizes_and_disjointness():
    data = load_digits_bundle(rng(0), test_fraction=0.2, public_fraction=0.1, public_imbalance=0.5)
    n = len(data.private) + len(data.public) + len(data.test)
    assert n == 1797 and data.input_shape == (1, 8, 8) and data.num_classes == 10
    x, y = data.private.batch(np.arange(4))
    assert x.shape == (4, 1, 8, 8) and 0 <= float(x.min()) and float(x.max()) <= 1
    hist = data.describe()["public_class_histogram"]
    assert sum(hist) == len(data.public) and min(hist) < max(hist)  # the skew is there
    # no image appears in two splits
    flat = lambda s: {tuple(v.flatten().tolist()) + (int(y),) for v, y in zip(s.inputs, s.labels)}  # noqa: E731
    assert not flat(data.public) & flat(data.test)


def test_the_digits_are_scikit_learns_exactly():
    """The digits a run reads from scikit-learn's file are `load_digits`' images and labels, value
    for value and type for type."""
    from sklearn.datasets import load_digits

    images, labels = digits_arrays()
    digits = load_digits()
    assert images.dtype == digits.images.dtype and labels.dtype == digits.target.dtype
    assert np.array_equal(images, digits.images) and np.array_equal(labels, digits.target)


def test_a_digits_bundle_leaves_scikit_learn_unimported(tmp_path):
    """A digits run does not pay scikit-learn's import (a second or more of its start, with pandas)
    for one file read: the bundle is built in a fresh process without it."""
    code = ("import json, sys\n"
            "import numpy as np\n"
            "from pazo.data.digits import load_digits_bundle\n"
            "data = load_digits_bundle(np.random.default_rng(0))\n"
            "print(json.dumps([len(data.private) + len(data.public) + len(data.test), 'sklearn' in sys.modules]))\n")
    size, sklearn_loaded = json.loads(fresh_python(code, tmp_path).stdout.splitlines()[-1])
    assert size == 1797 and not sklearn_loaded
