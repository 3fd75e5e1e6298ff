"""Tiny-ImageNet setting: the loader on a fixture in the official layout (and the ImageFolder val
layout), public splits and out-of-distribution public folders, the decoded-image cache, timm ViT
under vmap and both engines, checkpoint initialisation, and a tiny run through Hydra."""
import shutil

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

import pazo.data.image_folder as image_folder
from model_checks import check_engines_and_per_example_grads
from fixtures import write_image_folder, write_tiny_imagenet
from pazo.data.tiny_imagenet import load_tiny_imagenet_bundle, read_tiny_imagenet
from pazo.errors import ConfigError, DataMissingError
from pazo.models import FunctionalModel
from pazo.models.vit import build_vit
from pazo.train import run

SMALL_VIT = {"patch_size": 8, "depth": 2, "embed_dim": 32, "num_heads": 2}


@pytest.fixture(scope="module")
def tin_root(tmp_path_factory):
    return write_tiny_imagenet(tmp_path_factory.mktemp("tin"))


def cfg(root, **kw):
    base = {"root": str(root), "download": False, "public_source": "split", "public_per_class": 2,
            "public_imbalance": 0.0, "public_folder": None, "image_size": 32, "augment_public": True,
            "cache_dir": None}
    return OmegaConf.create({**base, **kw})


def bundle(root, seed=0, **kw):
    return load_tiny_imagenet_bundle(cfg(root, **kw), np.random.default_rng(seed), torch.Generator().manual_seed(0))


def test_reads_the_official_layout_with_labels_and_grey_files(tin_root):
    x, y, xv, yv, classes = read_tiny_imagenet(tin_root)
    assert x.shape == (40, 3, 64, 64) and x.dtype == torch.uint8 and xv.shape == (12, 3, 64, 64)
    assert classes == sorted(classes) and len(classes) == 4
    assert torch.bincount(y).tolist() == [10] * 4 and torch.bincount(yv).tolist() == [3] * 4
    # the fixture writes class c with a red level rising in c: labels must follow the files
    red = torch.stack([x[y == c, 0].float().mean() for c in range(4)])
    red_val = torch.stack([xv[yv == c, 0].float().mean() for c in range(4)])
    assert (red.diff() > 20).all() and (red_val.diff() > 20).all()
    grey = x[0]  # file 0 of each class is single-channel: decoded as RGB with equal channels
    assert torch.equal(grey[0], grey[1]) and torch.equal(grey[1], grey[2])


def test_imagefolder_val_layout_reads_the_same(tin_root, tmp_path):
    copy = tmp_path / "tiny-imagenet-200"
    shutil.copytree(tin_root / "tiny-imagenet-200", copy)
    val = copy / "val"
    for line in (val / "val_annotations.txt").read_text().splitlines():
        name, wnid = line.split("\t")[:2]
        (val / wnid).mkdir(exist_ok=True)
        (val / "images" / name).rename(val / wnid / name)
    (val / "val_annotations.txt").unlink()
    (val / "images").rmdir()
    *_, xv, yv, _ = read_tiny_imagenet(tmp_path)
    assert xv.shape == (12, 3, 64, 64) and torch.bincount(yv).tolist() == [3] * 4


def test_missing_data_says_what_where_and_how(tmp_path):
    with pytest.raises(DataMissingError) as err:
        read_tiny_imagenet(tmp_path)
    msg = str(err.value)
    assert "Tiny-ImageNet is missing" in msg and str(tmp_path / "tiny-imagenet-200") in msg
    assert "dataset.download=true" in msg and "tiny-imagenet-200.zip" in msg


def test_public_split_sizes_disjoint_seeded_and_imbalanced(tin_root):
    a, b, c = bundle(tin_root), bundle(tin_root), bundle(tin_root, seed=1)
    assert (len(a.public), len(a.private), len(a.test)) == (8, 32, 12) and a.num_classes == 4
    assert a.describe()["public_class_histogram"] == [2, 2, 2, 2]
    assert torch.equal(a.public.inputs, b.public.inputs) and not torch.equal(a.public.inputs, c.public.inputs)
    pub = {bytes(v.numpy()) for v in a.public.inputs}
    assert not any(bytes(v.numpy()) in pub for v in a.private.inputs)
    skewed = bundle(tin_root, public_per_class=5, public_imbalance=0.8)
    hist = skewed.describe()["public_class_histogram"]
    assert sum(hist) == 20 and min(hist) / max(hist) == pytest.approx(0.2, abs=0.15)
    x, _ = a.private.batch(np.arange(3))
    assert x.shape == (3, 3, 32, 32) and x.dtype == torch.float32


def test_decoded_images_are_cached(tin_root, tmp_path, monkeypatch):
    first = read_tiny_imagenet(tin_root, cache_dir=str(tmp_path))
    assert list((tmp_path / "images").glob("*.pt"))

    def no_decoding(*_):
        raise AssertionError("decoded again despite the cache")
    monkeypatch.setattr(image_folder, "decode_images", no_decoding)
    import pazo.data.tiny_imagenet as tin
    monkeypatch.setattr(tin, "decode_images", no_decoding)
    second = read_tiny_imagenet(tin_root, cache_dir=str(tmp_path))
    assert torch.equal(first[0], second[0]) and torch.equal(first[3], second[3])


def test_another_image_folder_as_public_data(tin_root, tmp_path):
    _, _, _, _, classes = read_tiny_imagenet(tin_root)
    ood = tmp_path / "places"
    write_image_folder(ood, classes[:2], per_class=4, size=48, seed=9)  # other size, subset of classes
    data = bundle(tin_root, public_source="folder", public_folder=str(ood), public_per_class=3)
    assert data.describe()["public_class_histogram"] == [3, 3, 0, 0]
    assert len(data.private) == 40 and data.public.inputs.shape[1:] == (3, 64, 64)
    assert data.info["public"] == str(ood)
    again = bundle(tin_root, public_source="folder", public_folder=str(ood), public_per_class=3)
    assert torch.equal(data.public.inputs, again.public.inputs)
    write_image_folder(ood, ["not_a_class"], per_class=1)
    with pytest.raises(ConfigError, match="not_a_class"):
        bundle(tin_root, public_source="folder", public_folder=str(ood), public_per_class=1)
    with pytest.raises(DataMissingError, match="does not exist"):
        bundle(tin_root, public_source="folder", public_folder=str(tmp_path / "nowhere"), public_per_class=1)


def small_vit(num_classes=4, **kw):
    torch.manual_seed(0)
    return build_vit("vit_tiny_patch16_224", num_classes, image_size=32, overrides=SMALL_VIT, **kw)


def test_eager_attention_equals_the_fused_kernel():
    eager, fused = small_vit().eval(), small_vit(attention="fused").eval()
    x = torch.rand(3, 3, 32, 32)
    assert torch.allclose(eager(x), fused(x), atol=1e-5)
    assert all(not m.fused_attn for m in eager.modules() if hasattr(m, "fused_attn"))


def test_vit_under_vmap_both_engines_and_per_example_grads():
    model = FunctionalModel(small_vit())
    x, y = torch.rand(4, 3, 32, 32), torch.tensor([0, 1, 2, 3])
    check_engines_and_per_example_grads(model, x, y, chunk=3)


def test_checkpoint_initialisation_refits_the_head_only(tmp_path):
    source = small_vit(num_classes=10)
    torch.save({"state_dict": source.state_dict()}, tmp_path / "places.pt")
    loaded = small_vit(num_classes=4, checkpoint=str(tmp_path / "places.pt"))
    assert loaded.pazo_init["head_reinitialised"]
    assert torch.equal(loaded.blocks[1].mlp.fc1.weight, source.blocks[1].mlp.fc1.weight)
    assert loaded.head.weight.shape == (4, 32)
    wider = build_vit("vit_tiny_patch16_224", 4, image_size=32, overrides={**SMALL_VIT, "depth": 3})
    torch.save(wider.state_dict(), tmp_path / "deeper.pt")
    with pytest.raises(ConfigError, match="does not fit"):
        small_vit(checkpoint=str(tmp_path / "deeper.pt"))
    with pytest.raises(DataMissingError, match="model.checkpoint"):
        small_vit(checkpoint=str(tmp_path / "absent.pt"))
    with pytest.raises(ConfigError, match="unknown ViT variant"):
        build_vit("vit_enormous", 4, image_size=32)


def test_tiny_run_of_the_tiny_imagenet_experiment(tin_root, hydra_cfg, tmp_path):
    c = hydra_cfg("experiment=tiny_imagenet", "method=pazo_m")
    assert c.model.variant == "vit_tiny_patch16_224" and c.dataset.public_per_class == 20
    assert c.method.lr == 1.0e-4 and c.dataset.image_size == 224 and c.warm_start.epochs == 5
    s = run(hydra_cfg("experiment=tiny_imagenet", "method=pazo_p", f"dataset.root={tin_root}",
                      "dataset.image_size=32", "dataset.public_per_class=2", "dataset.cache_dir=null",
                      *(f"model.{k}={v}" for k, v in SMALL_VIT.items()), "warm_start.epochs=1",
                      "train.batch_size=8", "method.public_batch_size=4", "train.eval_batch_size=16"),
            tmp_path)
    assert s["status"] == "finished" and s["privacy"]["within_budget"]
    assert s["data"]["public_class_histogram"] == [2, 2, 2, 2] and s["warm_start"]["epochs"] == 1
