"""dataset=image_folder: train/ and test/ class folders of real JPEG/PNG files; classes, channels
and size read from the data, the seeded public split, out-of-distribution public folders, the
errors a user's folder can cause, and a tiny PAZO-M run through Hydra."""
from functools import partial

import numpy as np
import pytest
import torch

from conftest import dataset_node, seeded_bundle
from fixtures import write_image_folder
from pazo.data.image_folder import load_image_folder_bundle
from pazo.errors import ConfigError, DataMissingError
from pazo.train import run

CLASSES = ["cat", "dog", "owl"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("imgs")
    write_image_folder(root / "train", CLASSES, per_class=10, size=20, seed=0)
    write_image_folder(root / "test", ["dog", "owl"], per_class=3, size=20, seed=1)  # a subset of the classes
    return root


@pytest.fixture
def folder_cfg(hydra_cfg, folder):
    return dataset_node(hydra_cfg, "dataset=image_folder", f"dataset.root={folder}")


load = partial(seeded_bundle, load_image_folder_bundle)


def red_level(x):
    return x[:, 0].float().mean(dim=(1, 2))


def test_classes_channels_and_size_come_from_the_folders(folder_cfg):
    data = load(folder_cfg("dataset.public_per_class=2"))
    assert data.input_shape == (3, 20, 20) and data.num_classes == 3 and len(data.test) == 6
    assert len(data.private) == 24 and data.public.class_histogram(3) == [2, 2, 2]
    assert sorted(set(data.test.labels.tolist())) == [1, 2]            # dog, owl: ids of the train folders
    # write_image_folder sets the red channel of the c-th of 3 classes to 20 + 100 c (of 2: 20 + 200 c)
    assert torch.allclose(red_level(data.private.inputs), 20 + 100 * data.private.labels.float(), atol=10)
    assert torch.allclose(red_level(data.test.inputs), 20 + 200 * (data.test.labels.float() - 1), atol=10)
    x, _ = data.test.batch(np.arange(2))
    assert x.shape == (2, 3, 20, 20) and -1 <= float(x.min()) and float(x.max()) <= 1   # normalised


def test_grey_folders_give_one_channel(tmp_path, hydra_cfg):
    from torchvision.io import write_png

    for part, n in (("train", 6), ("test", 2)):
        for c in ("a", "b"):
            (tmp_path / part / c).mkdir(parents=True)
            for i in range(n):
                grey = torch.full((1, 12, 12), 40 + 100 * (c == "b"), dtype=torch.uint8)
                write_png(grey, str(tmp_path / part / c / f"{i}.png"))
    data = load(hydra_cfg("dataset=image_folder", f"dataset.root={tmp_path}").dataset)
    assert data.input_shape == (1, 12, 12) and data.private.inputs.shape[1] == 1 and data.num_classes == 2


def test_images_of_several_sizes_need_image_size(tmp_path, hydra_cfg):
    write_image_folder(tmp_path / "train", ["a", "b"], per_class=4, size=16)
    write_image_folder(tmp_path / "test", ["a", "b"], per_class=1, size=24)
    cfg = hydra_cfg("dataset=image_folder", f"dataset.root={tmp_path}", "dataset.cache_dir=null").dataset
    with pytest.raises(ConfigError, match=r"not all square and of one size \(16x16, 24x24\).*dataset.image_size=N"):
        load(cfg)
    data = load(hydra_cfg("dataset=image_folder", f"dataset.root={tmp_path}", "dataset.image_size=8").dataset)
    assert data.input_shape == (3, 8, 8) and data.test.inputs.shape == (2, 3, 8, 8)


def test_a_test_class_unknown_to_train_is_one_error(tmp_path, hydra_cfg):
    write_image_folder(tmp_path / "train", ["a", "b"], per_class=2, size=8)
    write_image_folder(tmp_path / "test", ["a", "zebra"], per_class=1, size=8)
    with pytest.raises(ConfigError, match=r"test has classes that .*train lacks: zebra"):
        load(hydra_cfg("dataset=image_folder", f"dataset.root={tmp_path}").dataset)


def test_missing_folders_and_missing_root(tmp_path, hydra_cfg):
    with pytest.raises(DataMissingError, match=rf"no train/ folder in {tmp_path}.*train/<class>"):
        load(hydra_cfg("dataset=image_folder", f"dataset.root={tmp_path}").dataset)
    with pytest.raises(ConfigError, match="needs dataset.root=<folder holding train/ and test/"):
        load(hydra_cfg("dataset=image_folder").dataset)


def test_seeded_split_reproducible_disjoint_and_imbalanced(folder_cfg):
    cfg = folder_cfg("dataset.public_fraction=0.5", "dataset.public_imbalance=0.6")
    a, b, c = load(cfg, 1), load(cfg, 1), load(cfg, 2)
    assert torch.equal(a.public.inputs, b.public.inputs) and not torch.equal(a.public.inputs, c.public.inputs)
    public = {bytes(x.numpy()) for x in a.public.inputs}
    assert len(a.public) + len(a.private) == 30 and not any(bytes(x.numpy()) in public for x in a.private.inputs)
    hist = a.public.class_histogram(3)
    assert sum(hist) == 15 and min(hist) / max(hist) == pytest.approx(0.4, abs=0.15)


def test_another_folder_as_public_data(folder_cfg, tmp_path):
    write_image_folder(tmp_path / "ood", ["owl", "cat"], per_class=4, size=32, seed=5)
    data = load(folder_cfg("dataset.public_source=folder", f"dataset.public_folder={tmp_path / 'ood'}",
                           "dataset.public_per_class=3"))
    assert data.public.inputs.shape == (6, 3, 20, 20) and data.public.class_histogram(3) == [3, 0, 3]
    assert len(data.private) == 30 and data.describe()["public"] == str(tmp_path / "ood")


@pytest.mark.slow   # a whole run (about 18 s); in the quick suite: the loader's tests above and the digits runs of
# tests/run/test_train.py::test_every_method_runs_end_to_end
def test_tiny_pazo_m_run(folder, hydra_cfg, tmp_path):
    s = run(hydra_cfg("dataset=image_folder", f"dataset.root={folder}", "method=pazo_m", "dataset.public_per_class=3",
                      "train.batch_size=8", "method.public_batch_size=4"), tmp_path)
    assert s["status"] == "finished" and s["data"]["n_public"] == 9 and s["data"]["classes"] == 3
