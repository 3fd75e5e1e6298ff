"""dataset=torchvision: torchvision's own readers on fixtures in their on-disk formats (MNIST and
FashionMNIST idx files under <root>/<Name>/raw/, Food-101's meta/ and images/), shapes and
classes read from the data, the seeded public split, missing data, unknown names, and a tiny
PAZO-M run through Hydra."""
from functools import partial

import numpy as np
import pytest
import torch

from conftest import dataset_node, seeded_bundle
from fixtures import write_food101, write_image_folder, write_mnist_raw
from pazo.data.torchvision_data import CLASSIFICATION, _from_arrays, _from_items, load_torchvision_bundle, open_split
from pazo.errors import ConfigError, DataMissingError
from pazo.train import run

FOOD = ["apple_pie", "sushi", "tacos"]


@pytest.fixture(scope="module")
def tv_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("tv")
    write_mnist_raw(root, "MNIST", n_train=100, n_test=30)
    write_mnist_raw(root, "FashionMNIST", n_train=60, n_test=20, seed=1)
    write_food101(root, FOOD, train_per_class=6, test_per_class=2)
    return root


@pytest.fixture
def tv_cfg(hydra_cfg, tv_root):
    """The real configs/dataset/torchvision.yaml with overrides."""
    return dataset_node(hydra_cfg, "dataset=torchvision", f"dataset.root={tv_root}")


load = partial(seeded_bundle, load_torchvision_bundle)


def test_mnist_shapes_classes_and_pixels_from_the_idx_files(tv_cfg, tv_root):
    written = write_mnist_raw(tv_root / "again", n_train=100, n_test=30)  # the same seed: the same images
    data = load(tv_cfg())
    assert data.input_shape == (1, 28, 28) and data.num_classes == 10 and data.name == "MNIST"
    assert len(data.private) + len(data.public) == 100 and len(data.test) == 30 and len(data.public) == 4
    stored = torch.cat([data.private.inputs, data.public.inputs])
    assert stored.dtype == torch.uint8 and stored.shape[1:] == (1, 28, 28)
    assert {bytes(x.numpy()) for x in stored[:, 0]} == {bytes(x) for x in written}
    labels = torch.cat([data.private.labels, data.public.labels])
    assert torch.equal(stored[:, 0, 0, 0].long(), labels * 25)   # each image's own label
    x, _ = data.private.batch(np.arange(3))
    assert x.shape == (3, 1, 28, 28) and torch.allclose(x, (data.private.inputs[:3].float() / 255 - 0.5) / 0.5)


def test_array_fast_path_equals_torchvision_getitem(tv_root):
    import torchvision.datasets as tvd

    ds = tvd.MNIST(str(tv_root), train=False)
    x, y = _from_arrays(ds)
    items = _from_items(ds, None)
    assert torch.equal(x, items["images"]) and torch.equal(y, items["labels"])


def test_fashion_mnist_by_name_with_its_class_names(tv_cfg, tmp_path):
    data = load(tv_cfg("dataset.torchvision_name=FashionMNIST", "dataset.image_size=32",
                       "dataset.public_per_class=2"))
    assert data.input_shape == (1, 32, 32) and data.num_classes == 10 and len(data.test) == 20
    assert data.public.class_histogram(10) == [2] * 10
    x, _ = data.test.batch(np.arange(2))
    assert x.shape == (2, 1, 32, 32)                                  # resized per batch


def test_file_backed_food101_is_resized_once_and_cached(tv_cfg, tmp_path):
    with pytest.raises(ConfigError, match="not all square of one size.*dataset.image_size=N"):
        load(tv_cfg("dataset.torchvision_name=Food101"))
    cfg = tv_cfg("dataset.torchvision_name=Food101", "dataset.image_size=24", "dataset.public_per_class=1")
    data = load(cfg)
    assert data.input_shape == (3, 24, 24) and data.num_classes == 3 and len(data.test) == 6
    assert data.private.inputs.shape[1:] == (3, 24, 24) and data.public.class_histogram(3) == [1, 1, 1]
    green = torch.cat([data.private.inputs, data.public.inputs])[:, 1].float().mean(dim=(1, 2))
    labels = torch.cat([data.private.labels, data.public.labels])
    assert all(abs(float(g) - (30 + 80 * int(c))) < 8 for g, c in zip(green, labels))  # labels follow the folders
    assert list((tmp_path / "cache" / "images").glob("*.pt"))                         # decoded once, cached
    assert torch.equal(load(cfg).test.inputs, data.test.inputs)


def test_seeded_public_split_is_reproducible_disjoint_and_imbalanced(tv_cfg):
    cfg = tv_cfg("dataset.public_fraction=0.5", "dataset.public_imbalance=0.8")
    a, b, c = load(cfg, seed=3), load(cfg, seed=3), load(cfg, seed=4)
    assert torch.equal(a.public.inputs, b.public.inputs) and not torch.equal(a.public.inputs, c.public.inputs)
    public = {bytes(x.numpy()) for x in a.public.inputs}
    assert len(a.public) == 50 and not any(bytes(x.numpy()) in public for x in a.private.inputs)
    hist = a.describe()["public_class_histogram"]
    assert sum(hist) == 50 and min(hist) / max(hist) == pytest.approx(0.2, abs=0.1)
    assert a.describe()["public_imbalance"] == 0.8 and a.info["public_fraction"] == 0.5


def test_grey_data_gets_grey_public_images_from_a_folder(tv_cfg, tmp_path):
    write_image_folder(tmp_path / "pub", ["0 - zero", "3 - three"], per_class=3, size=20)  # colour JPEGs
    data = load(tv_cfg("dataset.public_source=folder", f"dataset.public_folder={tmp_path / 'pub'}",
                       "dataset.public_per_class=2"))
    assert data.public.inputs.shape == (4, 1, 28, 28) and data.public.class_histogram(10)[3] == 2
    assert len(data.private) == 100 and data.info["public_source"] == "folder"


def test_missing_files_say_what_where_and_how(tv_cfg, tmp_path):
    with pytest.raises(DataMissingError) as err:
        load(tv_cfg(f"dataset.root={tmp_path / 'none'}"))
    msg = str(err.value)
    assert msg.startswith("MNIST is missing: train-images-idx3-ubyte") and "\n" not in msg
    assert str(tmp_path / "none" / "MNIST" / "raw") in msg and "dataset.download=true" in msg


def test_unknown_or_unsupported_names_are_one_line(tv_cfg):
    with pytest.raises(ConfigError) as err:
        load(tv_cfg("dataset.torchvision_name=MNST"))
    msg = str(err.value)
    assert "unknown torchvision data set 'MNST'" in msg and "\n" not in msg
    assert all(name in msg for name in ("MNIST", "FashionMNIST", "CIFAR100", "SVHN")) and "CocoDetection" not in msg
    with pytest.raises(ConfigError, match="CocoDetection is not one of its image-classification"):
        load(tv_cfg("dataset.torchvision_name=CocoDetection"))


def test_refused_arguments_are_a_config_error(tv_cfg, tv_root):
    import torchvision.datasets as tvd

    with pytest.raises(ConfigError, match=r"EMNIST\(train=True, download=False\) refused.*torchvision_kwargs"):
        open_split(tvd.EMNIST, tv_cfg("dataset.torchvision_name=EMNIST"), tv_root, train=True)


def test_every_listed_name_is_a_torchvision_class_with_train_and_test():
    import inspect

    import torchvision.datasets as tvd

    for name in CLASSIFICATION:
        params = inspect.signature(getattr(tvd, name).__init__).parameters
        assert issubclass(getattr(tvd, name), tvd.MNIST) or "train" in params or "split" in params, name


@pytest.mark.slow   # a whole run (about 18 s); in the quick suite: the loader's tests above and the digits runs of
# tests/run/test_train.py::test_every_method_runs_end_to_end
def test_tiny_pazo_m_run_on_fashion_mnist(tv_root, hydra_cfg, tmp_path):
    s = run(hydra_cfg("dataset=torchvision", "dataset.torchvision_name=FashionMNIST", f"dataset.root={tv_root}",
                      "method=pazo_m", "dataset.public_fraction=0.2", "train.batch_size=16",
                      "method.public_batch_size=8"), tmp_path)
    assert s["status"] == "finished" and s["privacy"]["within_budget"]
    assert s["data"]["dataset"] == "FashionMNIST" and s["data"]["n_public"] == 12
