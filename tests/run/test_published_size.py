"""Where a published image set's data are not on this machine, a plan (`pazo-train --plan`, a
private selection's dry run) estimates n from its published size and the config's public split,
as the loader would split it: images of each class (`dataset.public_per_class`) or a fraction of the
whole (`dataset.public_fraction`), then the validation fraction of the rest."""
from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from conftest import tiny_cfg
from pazo.run.typed import run_config
from pazo.data import DATASETS
from pazo.sweep.selection import PUBLISHED_TRAIN_SIZE, private_size


@settings(max_examples=6)
@given(name=st.sampled_from(sorted(PUBLISHED_TRAIN_SIZE)), per_class=st.none() | st.integers(1, 100),
       fraction=st.sampled_from([0.01, 0.04, 0.2]), val=st.sampled_from([0.0, 0.1, 0.25]))
@example(name="tiny_imagenet", per_class=20, fraction=0.04, val=0.1)   # the shipped setting 2
def test_a_missing_published_set_is_estimated_as_its_loader_would_split_it(name, per_class, fraction, val):
    overrides = [f"dataset={name}", "dataset.root=/nonexistent/pazo-data", f"dataset.val_fraction={val}",
                 f"dataset.public_per_class={'null' if per_class is None else per_class}"]
    if name == "cifar10":
        overrides.append(f"dataset.public_fraction={fraction}")
    elif per_class is None:   # (tiny_imagenet splits its public data by class only)
        per_class = 20
        overrides[-1] = "dataset.public_per_class=20"
    total = PUBLISHED_TRAIN_SIZE[name]
    public = per_class * DATASETS.get(name).classes if per_class is not None else round(fraction * total)
    pool = total - public
    size = private_size(run_config(tiny_cfg(*overrides)))
    assert size.n == pool - round(val * pool)
    assert "estimated" in size.estimated and name in size.estimated
