"""The validation split of every data set: carved from the private set by `build_dataset`
(`dataset.val_fraction`, stratified, from the `validation` stream), leaving the public and test
splits as they were; `val_fraction=0` gives the private set of a run without it; MNLI's own
k-shot validation sample; one-line errors for bad sizes; and what a run's summary records."""
import numpy as np
import pytest
import torch

from fixtures import (write_cifar10, write_image_folder, write_imdb_and_amazon, write_mnist_raw, write_mnli_and_snli,
                      write_saved_text, write_tiny_imagenet, write_tiny_roberta)
from pazo.data import DATASETS, build_dataset
from pazo.data.base import DataBundle, TensorSplit
from pazo.data.validation import carve_validation
from pazo.errors import ConfigError
from pazo.rng import STREAMS, RandomStreams
from pazo.train import run
from pazo.run.validate import validate_config
from pazo.run.typed import run_config


@pytest.fixture(scope="module")
def roots(tmp_path_factory):
    root = tmp_path_factory.mktemp("valdata")
    write_cifar10(root / "cifar")
    write_tiny_imagenet(root / "tin")
    write_mnist_raw(root / "tv", "MNIST", n_train=100, n_test=30)
    write_image_folder(root / "folder" / "train", ["cat", "dog", "owl"], per_class=12, size=16)
    write_image_folder(root / "folder" / "test", ["cat", "dog", "owl"], per_class=2, size=16, seed=1)
    write_imdb_and_amazon(root / "text")
    write_saved_text(root / "hf" / "sst")
    write_mnli_and_snli(root / "nli")
    write_tiny_roberta(root / "nli" / "roberta")
    return root


def overrides(name, root):
    return {
        "digits": ("dataset=digits",),
        "cifar10": ("dataset=cifar10", f"dataset.root={root / 'cifar'}", "dataset.public_fraction=0.1"),
        "tiny_imagenet": ("dataset=tiny_imagenet", f"dataset.root={root / 'tin'}", "dataset.public_per_class=2",
                          "dataset.image_size=32", "dataset.cache_dir=null"),
        "torchvision": ("dataset=torchvision", f"dataset.root={root / 'tv'}", "dataset.cache_dir=null"),
        "image_folder": ("dataset=image_folder", f"dataset.root={root / 'folder'}", "dataset.cache_dir=null"),
        "imdb": ("dataset=imdb", f"dataset.root={root / 'text'}", "dataset.public_size=20", "dataset.test_size=16",
                 "dataset.max_length=12"),
        "hf_text": ("dataset=hf_text", f"dataset.root={root / 'hf'}", "dataset.hf_name=sst",
                    "dataset.text_column=sentence", "dataset.test_split=validation", "dataset.max_length=24"),
        "mnli": ("dataset=mnli", f"dataset.root={root / 'nli'}", f"dataset.tokenizer={root / 'nli' / 'roberta'}",
                 "dataset.k_shot=8", "dataset.public_per_class=3", "dataset.test_size=10", "dataset.val_k_shot=0"),
    }[name]


def rows(split: TensorSplit) -> list:
    return sorted((bytes(x.contiguous().numpy()), int(y)) for x, y in zip(split.inputs, split.labels))


TEXT = {"imdb", "hf_text", "mnli"}


@pytest.mark.parametrize("name", ["digits", "cifar10", "tiny_imagenet", "torchvision", "image_folder", "imdb",
                                  "hf_text", "mnli"])
def test_every_data_set_carves_a_seeded_stratified_validation_split(name, roots, hydra_cfg):
    def build(fraction, seed=0):
        return build_dataset(run_config(hydra_cfg(*overrides(name, roots), f"dataset.val_fraction={fraction}")).dataset,
                             RandomStreams(seed))

    plain, data, again, other = build(0), build(0.25), build(0.25), build(0.25, seed=1)
    k = data.num_classes
    # the validation examples left the private set: together they are the private set without validation
    assert len(data.val) > 0 and len(data.private) + len(data.val) == len(plain.private)
    assert sorted(rows(data.private) + rows(data.val)) == rows(plain.private)
    # stratified: a quarter of each class (stratified_holdout's rounding)
    assert data.val.class_histogram(k) == [int(round(0.25 * n)) for n in plain.private.class_histogram(k)]
    # public and test splits are those of a run without validation
    assert torch.equal(data.public.inputs, plain.public.inputs) and torch.equal(data.test.inputs, plain.test.inputs)
    if name not in TEXT:   # images are all distinct; short texts may encode alike, their disjointness is by index
        assert not set(rows(data.val)) & set(rows(data.public) + rows(data.test))
    assert torch.equal(data.val.inputs, again.val.inputs) and not torch.equal(data.val.inputs, other.val.inputs)
    # fed to the model as private batches are
    (xv, _), (xp, _) = data.val.batch(np.arange(2)), data.private.batch(np.arange(2))
    assert xv.dtype == xp.dtype and xv.shape[1:] == xp.shape[1:]
    d = data.describe()
    assert (d["n_val"], d["n_private"], d["val_fraction"]) == (len(data.val), len(data.private), 0.25)
    assert "non-private selection statistic" in d["val_outside_guarantee"]
    assert plain.describe()["n_val"] == 0 and "val_outside_guarantee" not in plain.describe()


@pytest.mark.parametrize("name", ["digits", "cifar10", "imdb"])
def test_val_fraction_zero_is_the_data_of_a_run_without_validation(name, roots, hydra_cfg):
    cfg = run_config(hydra_cfg(*overrides(name, roots), "dataset.val_fraction=0")).dataset
    plain = build_dataset(cfg, RandomStreams(3))
    loader = DATASETS.get(cfg.name)(cfg, RandomStreams(3))      # the loader alone, as before validation existed
    for part in ("private", "public", "test"):
        assert torch.equal(getattr(plain, part).inputs, getattr(loader, part).inputs)
        assert torch.equal(getattr(plain, part).labels, getattr(loader, part).labels)
    assert len(plain.val) == 0


def test_the_validation_stream_leaves_the_other_streams_seeds_alone():
    assert STREAMS[-1] == "validation"
    old = np.random.SeedSequence(7).spawn(len(STREAMS) - 1)
    streams = RandomStreams(7)
    for name, child in zip(STREAMS, old):
        assert streams.seeds[name] == int(child.generate_state(1, dtype=np.uint64)[0] >> 1)


def test_carving_by_hand():
    labels = torch.tensor([0] * 10 + [1] * 20 + [2] * 5)
    private = TensorSplit(torch.arange(35.0)[:, None], labels)
    data = DataBundle("toy", private, private.subset(np.arange(0)), private.subset(np.arange(0)), 3, (1,))
    carved = carve_validation(data, 0.2, np.random.default_rng(0))
    assert carved.val.class_histogram(3) == [2, 4, 1] and len(carved.private) == 28
    assert sorted(carved.private.inputs[:, 0].tolist() + carved.val.inputs[:, 0].tolist()) == list(range(35))
    assert carve_validation(data, 0, np.random.default_rng(0)) is data
    with pytest.raises(ConfigError, match="already draws its own validation set"):
        carve_validation(carved, 0.1, np.random.default_rng(0))


@pytest.mark.parametrize("value", ["-0.1", "1", "1.5", "abc", "true"])
def test_a_bad_val_fraction_is_one_config_error(value, hydra_cfg):
    with pytest.raises(ConfigError, match=r"dataset.val_fraction must be (in \[0, 1\)|a number)") as err:
        validate_config(hydra_cfg(f"dataset.val_fraction={value}"))
    assert "\n" not in str(err.value)


def test_mnli_validation_is_a_second_k_shot_sample_disjoint_from_the_private_one(roots, hydra_cfg):
    base = [o for o in overrides("mnli", roots) if not o.startswith("dataset.val_k_shot")]
    cfg = run_config(hydra_cfg(*base, "dataset.k_shot=5")).dataset
    assert cfg.val_k_shot == 5 and cfg.val_fraction == 0          # the MeZO/DPZero dev set: k per class
    data = build_dataset(cfg, RandomStreams(0))
    assert len(data.private) == 15 and data.val.class_histogram(3) == [5, 5, 5]
    assert data.describe()["val_k_shot"] == 5 and "val_outside_guarantee" in data.describe()
    # k_shot + val_k_shot = all 15 rows of each class: the two samples partition MNLI train
    whole = build_dataset(run_config(hydra_cfg(*base, "dataset.k_shot=15", "dataset.val_k_shot=0")).dataset,
                          RandomStreams(0))
    full = rows(whole.private)
    parts = build_dataset(run_config(hydra_cfg(*base, "dataset.k_shot=5", "dataset.val_k_shot=10")).dataset,
                          RandomStreams(0))
    assert sorted(rows(parts.private) + rows(parts.val)) == full
    with pytest.raises(ConfigError, match="asked for 11 MNLI train validation examples .* only 10"):
        build_dataset(run_config(hydra_cfg(*base, "dataset.k_shot=5", "dataset.val_k_shot=11")).dataset,
                      RandomStreams(0))
    with pytest.raises(ConfigError, match="val_fraction=0.1 and dataset.val_k_shot=5 both"):
        validate_config(hydra_cfg("experiment=mnli", "dataset.k_shot=5", "dataset.val_fraction=0.1"))


def test_a_run_trains_on_the_smaller_private_set(hydra_cfg, tmp_path):
    s = run(hydra_cfg("method=dpzero"), tmp_path)
    data = s["data"]
    assert data["n_val"] == 129 and data["n_private"] + data["n_val"] == 1294   # digits: 1797 - test - public
    assert s["privacy"]["delta"] == pytest.approx(1 / data["n_private"])
