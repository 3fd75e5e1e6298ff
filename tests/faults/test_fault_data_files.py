"""Corrupt data files (issue family 2): fixtures in the real on-disk formats (CIFAR-10's pickled
batches, Tiny-ImageNet's folders, image folders, IMDB and other data sets saved by Hugging Face
`save_to_disk`, torchvision's raw MNIST files and Food-101's images), each damaged as a cut-off
download or a bad disk leaves them. Each is one line naming the file, saying what is wrong and how
to get it again (a DataCorruptError, exit 2), and the data files are left as they were."""
import pickle
import shutil
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from fault_runtime_helpers import TINY, one_error_line, run_cli, snapshot
from fixtures import (write_cifar10, write_food101, write_image_folder, write_imdb_and_amazon, write_mnist_raw,
                      write_saved_text, write_tiny_imagenet)
from pazo.data.cifar10 import read_cifar10
from pazo.data.hf_text import load_hf_text_bundle
from pazo.data.image_folder import load_public_folder, read_image_folder
from pazo.data.imdb import load_imdb_bundle
from pazo.data.tiny_imagenet import read_tiny_imagenet
from pazo.data.torchvision_data import dataset_class, read_split
from pazo.errors import DataCorruptError


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    """Every fixture once; each test damages its own copy."""
    root = tmp_path_factory.mktemp("pristine")
    write_cifar10(root / "cifar")
    write_tiny_imagenet(root / "tiny")
    write_image_folder(root / "folder" / "train", ["cat", "dog"], per_class=4, size=16)
    write_image_folder(root / "folder" / "test", ["cat", "dog"], per_class=2, size=16, seed=1)
    write_imdb_and_amazon(root / "text", n_train=20, n_test=12, n_amazon=16)
    write_saved_text(root / "hf" / "sst", n_train=24, n_validation=6, n_test=6)
    write_mnist_raw(root / "tv", "MNIST", n_train=40, n_test=10)
    write_food101(root / "tv", ["apple_pie", "sushi"], train_per_class=3, test_per_class=1)
    return root


@pytest.fixture
def copy(pristine, tmp_path):
    def take(name: str) -> Path:
        shutil.copytree(pristine / name, tmp_path / name)
        return tmp_path / name
    return take


def damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    path.write_bytes({"truncated": data[:len(data) // 2], "empty": b"", "garbage": b"\x13\x37 not this" * 40,
                      "head_only": data[:16]}[how])


def assert_one_line(err: DataCorruptError, *names: str) -> str:
    message = str(err)
    assert "\n" not in message
    for name in names:
        assert name in message, message
    return message


# --- CIFAR-10 -------------------------------------------------------------------------------------------

def _pickled(obj) -> bytes:
    return pickle.dumps(obj)


CIFAR_DAMAGE = {
    "truncated": lambda data: data[:len(data) // 2],
    "empty": lambda data: b"",
    "garbage": lambda data: b"\x80\x04 garbage" * 50,
    "html_error_page": lambda data: b"<html><body>503 Service Unavailable</body></html>",
    "a_list": lambda data: _pickled([1, 2, 3]),
    "no_data_key": lambda data: _pickled({b"labels": [0, 1]}),
    "rows_of_another_width": lambda data: _pickled({b"data": np.zeros((2, 100), np.uint8), b"labels": [0, 1]}),
    "floats_not_pixels": lambda data: _pickled({b"data": np.zeros((2, 3072), np.float32), b"labels": [0, 1]}),
    "fewer_labels_than_images": lambda data: _pickled({b"data": np.zeros((3, 3072), np.uint8), b"labels": [0, 1]}),
    "label_out_of_range": lambda data: _pickled({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0, 12]}),
    "a_foreign_class": lambda data: _pickled({b"data": OrderedDict(), b"labels": [0]}),
}


@pytest.mark.parametrize("how", list(CIFAR_DAMAGE))
@pytest.mark.parametrize("name", ["data_batch_3", "test_batch"])
def test_a_corrupt_cifar10_batch_names_the_file_and_how_to_get_it_again(how, name, copy):
    root = copy("cifar")
    path = root / "cifar-10-batches-py" / name
    path.write_bytes(CIFAR_DAMAGE[how](path.read_bytes()))
    before = snapshot(root)
    with pytest.raises(DataCorruptError) as caught:
        read_cifar10(root)
    assert_one_line(caught.value, f"CIFAR-10 file {path} is corrupt", "Get it again", "dataset.download=true")
    assert snapshot(root) == before


# --- Tiny-ImageNet and image folders --------------------------------------------------------------------

@pytest.mark.parametrize("how", ["truncated", "empty", "garbage", "head_only"])
@pytest.mark.parametrize("where", ["train", "val"])
def test_a_corrupt_tiny_imagenet_image_names_the_file(how, where, copy):
    root = copy("tiny")
    folder = root / "tiny-imagenet-200" / where
    path = sorted(folder.rglob("*.JPEG"))[1]
    damage(path, how)
    with pytest.raises(DataCorruptError) as caught:
        read_tiny_imagenet(root)
    assert_one_line(caught.value, f"image {path} cannot be decoded", "tiny-imagenet-200",
                    "dataset.download=true")


@pytest.mark.parametrize("content", ["val_0.JPEG\n", "\tn00001000\t0\n", "\xff\xfe"])
def test_a_corrupt_tiny_imagenet_annotation_file_names_it(content, copy):
    root = copy("tiny")
    path = root / "tiny-imagenet-200" / "val" / "val_annotations.txt"
    path.write_bytes(content.encode("latin-1"))
    with pytest.raises(DataCorruptError) as caught:
        read_tiny_imagenet(root)
    assert_one_line(caught.value, f"Tiny-ImageNet file {path} is corrupt", "get it again")


@pytest.mark.parametrize("how", ["truncated", "empty", "garbage"])
@pytest.mark.parametrize("image_size", [None, 16])   # the size read from the headers (PIL), or set (decoded)
def test_a_corrupt_image_in_an_image_folder_names_the_file(how, image_size, copy):
    root = copy("folder")
    path = sorted((root / "test" / "dog").iterdir())[0]
    damage(path, how)
    with pytest.raises(DataCorruptError) as caught:
        read_image_folder(root, image_size)
    assert_one_line(caught.value, f"image {path}", "replace it with a good copy, or delete it")


def test_a_corrupt_image_in_a_public_folder_names_the_file(copy):
    root = copy("folder")
    path = sorted((root / "train" / "cat").iterdir())[2]
    damage(path, "garbage")
    with pytest.raises(DataCorruptError) as caught:
        load_public_folder(root / "train", ["cat", "dog"], 16, per_class=None, rng=np.random.default_rng(0))
    assert_one_line(caught.value, f"image {path}")


# --- data sets saved by Hugging Face datasets (IMDB, Amazon Polarity, hf_text) ---------------------------

def _arrow(folder: Path, split: str = "train") -> Path:
    return next((folder / split).glob("*.arrow"))


HF_DAMAGE = {
    "arrow_truncated": lambda f: (damage(_arrow(f), "truncated"), _arrow(f))[1],
    "arrow_garbage": lambda f: (damage(_arrow(f), "garbage"), _arrow(f))[1],
    "arrow_empty": lambda f: (damage(_arrow(f), "empty"), _arrow(f))[1],
    "arrow_deleted": lambda f: (lambda p: (p.unlink(), p)[1])(_arrow(f)),
    "dataset_dict_garbage": lambda f: (damage(f / "dataset_dict.json", "garbage"), f / "dataset_dict.json")[1],
    "dataset_dict_deleted": lambda f: ((f / "dataset_dict.json").unlink(), f)[1],
    "state_empty": lambda f: (damage(f / "train" / "state.json", "empty"), f / "train" / "state.json")[1],
    "state_deleted": lambda f: ((f / "train" / "state.json").unlink(), f / "train" / "state.json")[1],
    "info_truncated": lambda f: (damage(f / "test" / "dataset_info.json", "truncated"),
                                 f / "test" / "dataset_info.json")[1],
}


def _imdb_cfg(root: Path):
    return OmegaConf.create({"root": str(root), "download": False, "public_size": 8, "test_size": 6,
                             "public_with_title": False, "vocab_source": "public", "vocab_size": 50,
                             "max_length": 16})


@pytest.mark.parametrize("how", list(HF_DAMAGE))
def test_a_corrupt_saved_imdb_names_the_damaged_file(how, copy):
    root = copy("text")
    named = HF_DAMAGE[how](root / "imdb")
    with pytest.raises(DataCorruptError) as caught:
        load_imdb_bundle(_imdb_cfg(root), np.random.default_rng(0))
    assert_one_line(caught.value, f"saved Hugging Face data set {root / 'imdb'} is corrupt", str(named),
                    "dataset.download=true", "stanfordnlp/imdb")


@pytest.mark.parametrize("how", ["arrow_truncated", "state_empty"])
def test_a_corrupt_saved_amazon_polarity_names_it(how, copy):
    root = copy("text")
    if how == "arrow_truncated":
        damage(_arrow(root / "amazon_polarity"), "truncated")
    else:
        damage(root / "amazon_polarity" / "train" / "state.json", "empty")
    with pytest.raises(DataCorruptError) as caught:
        load_imdb_bundle(_imdb_cfg(root), np.random.default_rng(0))
    assert_one_line(caught.value, str(root / "amazon_polarity"), "fancyzhx/amazon_polarity")


def _hf_cfg(root: Path, **extra):
    return OmegaConf.create({"root": str(root), "hf_name": "sst", "hub_id": None, "hub_config": None,
                             "download": False, "train_split": "train", "test_split": "validation",
                             "text_column": "sentence", "text_pair_column": None, "label_column": "label",
                             "public_source": "split", "public_fraction": 0.25, "public_per_class": None,
                             "public_imbalance": 0.0, "public_folder": None, "public_split": "train",
                             "test_size": None, "vocab_source": "public", "vocab_size": 50, "max_length": 16,
                             **extra})


def test_a_corrupt_hf_text_data_set_names_the_file(copy):
    root = copy("hf")
    damage(_arrow(root / "sst", "validation"), "truncated")
    with pytest.raises(DataCorruptError) as caught:
        load_hf_text_bundle(_hf_cfg(root), np.random.default_rng(0))
    assert_one_line(caught.value, str(_arrow(root / "sst", "validation")), "dataset.download=true")


def test_a_corrupt_public_hf_folder_names_the_file(copy, tmp_path):
    root = copy("hf")
    public = tmp_path / "public"
    shutil.copytree(root / "sst", public)
    damage(public / "train" / "state.json", "garbage")
    with pytest.raises(DataCorruptError) as caught:
        load_hf_text_bundle(_hf_cfg(root, public_source="folder", public_folder=str(public)),
                            np.random.default_rng(0))
    assert_one_line(caught.value, str(public / "train" / "state.json"), "save it again")


# --- torchvision's raw files ---------------------------------------------------------------------------

def _tv_cfg(**extra):
    return OmegaConf.create({"train_split": "train", "test_split": "test", "torchvision_kwargs": None,
                             "download": False, "cache_dir": None, "image_size": extra.get("image_size")})


@pytest.mark.parametrize("how", ["truncated", "empty", "garbage", "head_only"])
@pytest.mark.parametrize("name", ["train-images-idx3-ubyte", "train-labels-idx1-ubyte"])
def test_a_corrupt_mnist_raw_file_names_it(how, name, copy):
    root = copy("tv")
    path = root / "MNIST" / "raw" / name
    damage(path, how)
    with pytest.raises(DataCorruptError) as caught:
        read_split(dataset_class("MNIST"), _tv_cfg(), root, train=True)
    assert_one_line(caught.value, f"MNIST file {path} is corrupt", "dataset.download=true")


def test_a_corrupt_food101_image_names_it(copy):
    root = copy("tv")
    path = sorted((root / "food-101" / "images" / "sushi").glob("train*.jpg"))[0]
    damage(path, "garbage")
    cls = dataset_class("Food101")
    cfg = OmegaConf.create({"train_split": "train", "test_split": "test", "torchvision_kwargs": None,
                            "download": False, "cache_dir": None, "image_size": 16})
    with pytest.raises(DataCorruptError) as caught:
        read_split(cls, cfg, root, train=True)
    assert_one_line(caught.value, str(path), "Food101 is corrupt")


def test_data_corrupt_error_is_one_of_the_users_errors():
    from pazo.run.cli import USER_ERRORS

    assert issubclass(DataCorruptError, USER_ERRORS)


# --- as a user meets it: one line, exit 2, nothing trained -------------------------------------------

def test_cli_corrupt_cifar10_is_one_line_before_compute(copy, tmp_path, capsys):
    root = copy("cifar")
    damage(root / "cifar-10-batches-py" / "data_batch_1", "truncated")
    code, _, err = run_cli([*TINY, "dataset=cifar10", f"dataset.root={root}", f"hydra.run.dir={tmp_path / 'run'}"],
                           capsys)
    assert code == 2 and "data_batch_1 is corrupt" in one_error_line(err)
    assert not (tmp_path / "run" / "metrics.jsonl").exists() and not (tmp_path / "run" / "summary.json").exists()


def test_cli_corrupt_mnist_is_one_line_before_compute(copy, tmp_path, capsys):
    root = copy("tv")
    damage(root / "MNIST" / "raw" / "t10k-images-idx3-ubyte", "truncated")
    code, _, err = run_cli([*TINY, "dataset=torchvision", f"dataset.root={root}",
                            f"hydra.run.dir={tmp_path / 'run'}"], capsys)
    assert code == 2 and "t10k-images-idx3-ubyte is corrupt" in one_error_line(err)
    assert not (tmp_path / "run" / "summary.json").exists()


def test_intact_fixtures_load(copy):
    """The damage, not the fixtures, is what the cases above refuse."""
    x, y, xt, yt = read_cifar10(copy("cifar"))
    assert x.shape[1:] == (3, 32, 32) and len(x) == len(y)
    assert read_tiny_imagenet(copy("tiny"))[0].dtype == torch.uint8
    assert len(read_image_folder(copy("folder"), None)[4]) == 2
    assert len(load_imdb_bundle(_imdb_cfg(copy("text")), np.random.default_rng(0)).test) == 6
    assert len(read_split(dataset_class("MNIST"), _tv_cfg(), copy("tv"), train=True)[0]) == 40
