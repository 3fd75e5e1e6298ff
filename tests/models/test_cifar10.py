"""CIFAR-10 setting: the loader on a fixture in the official format, augmentation, NF-ResNet18
under vmap and both engines, warm start, and a tiny run through Hydra."""
import json

import pickle
import shutil

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from conftest import ROOT
from model_checks import check_engines_and_per_example_grads
from fixtures import write_cifar10, write_cinic10_like, write_image_folder
from pazo.data.cifar10 import CLASSES, load_cifar10_bundle, read_cifar10
from pazo.data.image_folder import content_hashes
from pazo.data.images import ImageTransform
from pazo.errors import ConfigError, DataMissingError
from pazo.models import FunctionalModel
from pazo.models.nf_resnet import NFResNet18
from pazo.train import run


@pytest.fixture(scope="module")
def cifar_root(tmp_path_factory):
    return write_cifar10(tmp_path_factory.mktemp("cifar"))


def cfg(root, **kw):
    base = {"root": str(root), "download": False, "public_fraction": 0.1, "public_imbalance": 0.0,
            "image_size": 32, "augment_public": True, "public_source": "split", "public_folder": None,
            "public_per_class": None, "cache_dir": None}
    return OmegaConf.create({**base, **kw})


def test_reads_the_official_format(cifar_root):
    x, y, xt, yt = read_cifar10(cifar_root)
    assert x.shape == (200, 3, 32, 32) and x.dtype == torch.uint8 and xt.shape == (50, 3, 32, 32)
    assert y.tolist()[:3] == [0, 1, 2]
    assert int(x[3, 0, 0, 0]) == 3 * 25  # row-major channel-first decoding: pixel (0, 0) of red


def test_missing_data_says_what_where_and_how(tmp_path):
    with pytest.raises(DataMissingError) as err:
        read_cifar10(tmp_path / "nowhere")
    msg = str(err.value)
    assert "data_batch_1" in msg and str(tmp_path / "nowhere") in msg and "dataset.download=true" in msg


def test_bundle_splits_sizes_seeding_and_imbalance(cifar_root):
    a = load_cifar10_bundle(cfg(cifar_root), np.random.default_rng(0), torch.Generator().manual_seed(0))
    b = load_cifar10_bundle(cfg(cifar_root), np.random.default_rng(0), torch.Generator().manual_seed(0))
    assert len(a.public) == 20 and len(a.private) == 180 and len(a.test) == 50
    assert torch.equal(a.public.inputs, b.public.inputs)
    # disjoint: no private image equals a public one (the fixture's images are all distinct)
    pub = {bytes(v.numpy()) for v in a.public.inputs}
    assert not any(bytes(v.numpy()) in pub for v in a.private.inputs)
    skewed = load_cifar10_bundle(cfg(cifar_root, public_fraction=0.5, public_imbalance=0.8),
                                 np.random.default_rng(0), torch.Generator().manual_seed(0))
    hist = skewed.describe()["public_class_histogram"]
    assert sum(hist) == 100 and min(hist) / max(hist) == pytest.approx(0.2, abs=0.1)


def test_transforms_resize_and_augment_only_public(cifar_root):
    data = load_cifar10_bundle(cfg(cifar_root, image_size=64), np.random.default_rng(0),
                               torch.Generator().manual_seed(0))
    x, _ = data.private.batch(np.arange(4))
    assert x.shape == (4, 3, 64, 64) and x.dtype == torch.float32 and 0 <= x.min() and x.max() <= 1
    raw = data.public.inputs[:16].float() / 255
    aug = ImageTransform(32, augment=True, generator=torch.Generator().manual_seed(1))(data.public.inputs[:16], "cpu")
    again = ImageTransform(32, augment=True, generator=torch.Generator().manual_seed(1))(data.public.inputs[:16], "cpu")
    assert torch.equal(aug, again) and not torch.allclose(aug, raw)
    plain = ImageTransform(32)(data.public.inputs[:16], "cpu")
    assert torch.allclose(plain, raw)


def small_nf():
    torch.manual_seed(0)
    return FunctionalModel(NFResNet18(10, width=4))


def test_nf_resnet18_shapes_and_no_batchnorm():
    model = small_nf()
    out = model.module(torch.rand(2, 3, 32, 32))
    assert out.shape == (2, 10)
    assert not any("BatchNorm" in type(m).__name__ for m in model.module.modules())
    big = NFResNet18(10, stem="imagenet")
    assert big(torch.rand(1, 3, 64, 64)).shape == (1, 10)
    assert 11_000_000 < sum(p.numel() for p in big.parameters()) < 11_300_000  # ResNet-18 size


def test_nf_resnet18_under_vmap_and_both_engines():
    model = small_nf()
    x, y = torch.rand(3, 3, 32, 32), torch.tensor([1, 2, 3])
    check_engines_and_per_example_grads(model, x, y, chunk=2)


@pytest.mark.usefixtures("cheap_pld")   # (three runs; none reads a PLD bound)
def test_tiny_cifar_run_with_cached_warm_start(cifar_root, hydra_cfg, tmp_path):
    overrides = ["dataset=cifar10", f"dataset.root={cifar_root}", "dataset.public_fraction=0.1",
                 "model=nf_resnet18", "model.width=4", "train.batch_size=16", "method=pazo_m",
                 "method.public_batch_size=8", "warm_start.epochs=1", "warm_start.batch_size=8"]
    first = run(hydra_cfg(*overrides), tmp_path / "a")
    assert first["status"] == "finished" and first["warm_start"]["cached"] is False
    second = run(hydra_cfg(*overrides), tmp_path / "b")
    assert second["warm_start"]["cached"] is True
    assert json.loads((tmp_path / "b/summary.json").read_text())["data"]["n_public"] == 20
    other = run(hydra_cfg(*overrides, "warm_start.lr=0.01"), tmp_path / "c")
    assert other["warm_start"]["cached"] is False  # a different warm start is not served from the cache


def test_cli_missing_data_is_one_clear_message(tmp_path):
    import os
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "pazo.train", "dataset=cifar10", "model=nf_resnet18",
                          f"dataset.root={tmp_path}/none", "logger.mode=disabled", f"hydra.run.dir={tmp_path}/run"],
                         cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "PAZO_CACHE_DIR": str(tmp_path / "c")}, timeout=300)
    assert out.returncode == 2
    assert "pazo: error: CIFAR-10 is missing" in out.stderr and "Traceback" not in out.stderr


def test_experiment_config_composes_with_per_method_defaults(hydra_cfg):
    from pazo.methods import METHODS

    for name in METHODS.names():
        c = hydra_cfg("experiment=cifar10", f"method={name}")
        assert c.dataset.name == "cifar10" and c.model.name == "nf_resnet18"
        assert c.dataset.public_fraction == 0.04 and c.train.batch_size == 64
        assert c.train.epochs == (200 if name == "dpzero" else 100)
    assert hydra_cfg("experiment=cifar10", "method=pazo_p").method.k == 6  # from tuning
    assert hydra_cfg("experiment=cifar10", "method=pazo_p", "method.k=3").method.k == 3  # CLI wins
    assert hydra_cfg("method=pazo_p").method.k == 3  # the digits default is untouched


@pytest.mark.slow   # a whole run (about 14 s); in the quick suite: test_tiny_cifar_run_with_cached_warm_start (CIFAR-10
# and the NF-ResNet end to end) and test_experiment_config_composes_with_per_method_defaults
def test_tiny_run_of_the_cifar10_experiment(cifar_root, hydra_cfg, tmp_path):
    s = run(hydra_cfg("experiment=cifar10", "method=pazo_s", f"dataset.root={cifar_root}",
                      "dataset.public_fraction=0.2", "model.width=4", "train.batch_size=16",
                      "warm_start.epochs=0", "method.public_batch_size=8"), tmp_path)
    assert s["status"] == "finished" and s["privacy"]["within_budget"]


def test_another_image_folder_as_public_data(cifar_root, tmp_path):
    """CINIC-10-style public data: `<folder>/<CIFAR class name>/*.png`, labels mapped by name."""
    write_image_folder(tmp_path / "cinic", ["airplane", "cat"], per_class=3, size=32, seed=3)
    data = load_cifar10_bundle(cfg(cifar_root, public_source="folder", public_folder=str(tmp_path / "cinic"),
                                   public_per_class=2), np.random.default_rng(0), torch.Generator().manual_seed(0))
    hist = data.describe()["public_class_histogram"]
    assert hist[0] == 2 and hist[3] == 2 and sum(hist) == 4       # airplane = 0, cat = 3
    assert len(data.private) == 200 and data.info["public_source"] == "folder"


def test_public_folder_copies_of_test_images_are_dropped_and_of_training_images_not_looked_for(cifar_root, tmp_path):
    """CINIC-10 holds the CIFAR-10 images as PNG files: exact copies of test images never become
    public data, other images of a class replace them, and the count is recorded; copies of training
    (private) images are kept, since a check against them would release membership; a lossy
    re-encoding (a near-duplicate) is not recognised."""
    folder = tmp_path / "cinic"
    fresh = write_cinic10_like(folder, cifar_root, CLASSES, train_copies=list(range(30)),
                               test_copies=list(range(10)), fresh_per_class=3)
    x, _, xt, _ = read_cifar10(cifar_root)

    def load(**kw):
        return load_cifar10_bundle(cfg(cifar_root, public_source="folder", public_folder=str(folder), **kw),
                                   np.random.default_rng(0), torch.Generator().manual_seed(0))

    every = load()
    assert every.info["public_copies_of_test_dropped"] == 10 and "public_copies_of_private_dropped" not in every.info
    public = set(content_hashes(every.public.inputs))
    assert len(every.public) == 60 and not public & set(content_hashes(xt))
    assert len(public & set(content_hashes(x))) == 30
    # 6 of 10 files per class drawn: test copies drawn are replaced by other files of the class
    drawn = load(public_per_class=6)
    assert drawn.info["public_copies_of_test_dropped"] > 0 and drawn.public.class_histogram(10) == [6] * 10
    assert not set(content_hashes(drawn.public.inputs)) & set(content_hashes(xt))
    _, y, _, _ = read_cifar10(cifar_root)
    for c, name in enumerate(CLASSES):  # each class keeps exactly its 6 files that are not test copies
        got = sorted(content_hashes(drawn.public.inputs[drawn.public.labels == c]))
        train_copies = x[:30][y[:30] == c]
        assert got == sorted(content_hashes(fresh[name]) + content_hashes(train_copies))
    with pytest.raises(ConfigError, match="'airplane' but .* holds only 6 that are not copies of test"):
        load(public_per_class=7)
    near = tmp_path / "near"
    write_cinic10_like(near, cifar_root, CLASSES, train_copies=[], test_copies=[], fresh_per_class=1,
                       jpeg_copies=[0])
    kept = load_cifar10_bundle(cfg(cifar_root, public_source="folder", public_folder=str(near)),
                               np.random.default_rng(0), torch.Generator().manual_seed(0))
    assert len(kept.public) == 11 and kept.info["public_copies_of_test_dropped"] == 0


def test_the_public_folders_report_does_not_depend_on_a_private_image(cifar_root, tmp_path):
    """D and D minus the one training image whose copy sits in the public folder give the same
    public data and the same report of it (sizes, histogram, counts): no membership leaks."""
    folder = tmp_path / "cinic"
    write_cinic10_like(folder, cifar_root, CLASSES, train_copies=[0, 1], test_copies=[3], fresh_per_class=2)
    smaller = tmp_path / "smaller"
    shutil.copytree(cifar_root, smaller)
    batch = smaller / "cifar-10-batches-py" / "data_batch_1"
    with open(batch, "rb") as fh:
        d = pickle.load(fh)
    d[b"data"], d[b"labels"], d[b"filenames"] = d[b"data"][1:], d[b"labels"][1:], d[b"filenames"][1:]
    with open(batch, "wb") as fh:
        pickle.dump(d, fh)

    def public_report(root):
        data = load_cifar10_bundle(cfg(root, public_source="folder", public_folder=str(folder), public_per_class=2),
                                   np.random.default_rng(0), torch.Generator().manual_seed(0))
        described = data.describe()
        return ({k: v for k, v in described.items() if "public" in k},
                sorted(content_hashes(data.public.inputs)), len(data.private))

    full, minus = public_report(cifar_root), public_report(smaller)
    assert full[2] == minus[2] + 1
    assert full[:2] == minus[:2]
