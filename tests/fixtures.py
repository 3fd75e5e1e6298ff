"""Tiny data sets written in the real on-disk formats, for the loaders' tests."""
from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np


def write_cifar10(root: Path, per_batch: int = 40, n_test: int = 50, seed: int = 0) -> Path:
    """`root/cifar-10-batches-py/` with data_batch_1..5 and test_batch as CIFAR-10 ships them:
    pickled dicts with b'data' (N x 3072 uint8, channel-major rows) and b'labels'."""
    rng = np.random.default_rng(seed)
    folder = Path(root) / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)

    def write(name, n):
        labels = [int(i % 10) for i in range(n)]
        data = rng.integers(0, 256, size=(n, 3072), dtype=np.uint8)
        data[:, 0] = np.array(labels, dtype=np.uint8) * 25  # a learnable signal in the first pixel
        with open(folder / name, "wb") as fh:
            pickle.dump({b"batch_label": name.encode(), b"labels": labels, b"data": data,
                         b"filenames": [f"{i}.png".encode() for i in range(n)]}, fh)

    for i in range(1, 6):
        write(f"data_batch_{i}", per_batch)
    write("test_batch", n_test)
    with open(folder / "batches.meta", "wb") as fh:
        pickle.dump({b"label_names": [f"class{i}".encode() for i in range(10)]}, fh)
    return Path(root)


def write_cinic10_like(folder: Path, cifar_root: Path, classes: list[str], train_copies: list[int],
                       test_copies: list[int], fresh_per_class: int, jpeg_copies: list[int] | None = None,
                       seed: int = 0) -> dict:
    """A CINIC-10-like public folder `folder/<class>/` for the CIFAR-10 fixture at `cifar_root`:
    exact PNG copies of some CIFAR-10 training and test images, named as CINIC-10 names them
    (`cifar-10-<origin>-<index>.png`), `fresh_per_class` new images per class (`n0000_<i>.png`, as
    its ImageNet part), and JPEG re-encodings (near-duplicates) of some training images. Returns
    the fresh and the JPEG-copied images by class name, as uint8 [N, 3, 32, 32]."""
    import torch
    from torchvision.io import write_jpeg, write_png

    from pazo.data.cifar10 import read_cifar10

    x, y, xt, yt = read_cifar10(cifar_root)
    rng = np.random.default_rng(seed)
    for name in classes:
        (Path(folder) / name).mkdir(parents=True, exist_ok=True)
    for origin, images, labels, picks in (("train", x, y, train_copies), ("test", xt, yt, test_copies)):
        for i in picks:
            write_png(images[i], str(Path(folder) / classes[int(labels[i])] / f"cifar-10-{origin}-{i}.png"))
    for i in jpeg_copies or []:
        write_jpeg(x[i], str(Path(folder) / classes[int(y[i])] / f"cifar-10-train-{i}.jpg"), quality=90)
    fresh = {}
    for name in classes:
        fresh[name] = torch.from_numpy(rng.integers(0, 256, size=(fresh_per_class, 3, 32, 32), dtype=np.uint8))
        for i, img in enumerate(fresh[name]):
            write_png(img, str(Path(folder) / name / f"n0000_{i}.png"))
    return fresh


POSITIVE = ["great", "wonderful", "loved", "excellent", "fun"]
NEGATIVE = ["awful", "boring", "hated", "terrible", "waste"]
MOVIE_WORDS = ["the", "movie", "film", "plot", "actor", "and", "was", "a"]
PRODUCT_WORDS = ["the", "product", "item", "price", "and", "was", "a"]   # Amazon reviews never say movie, film, ...


def _review(rng, label: int, words: int, filler=tuple(MOVIE_WORDS)) -> str:
    pool = POSITIVE if label else NEGATIVE
    toks = [str(rng.choice(pool)) if rng.random() < 0.3 else str(rng.choice(filler)) for _ in range(words)]
    return " ".join(toks).capitalize() + "!"


def write_imdb_and_amazon(root: Path, n_train: int = 60, n_test: int = 40, n_amazon: int = 50,
                          seed: int = 0) -> Path:
    """`root/imdb` and `root/amazon_polarity` as `datasets.DatasetDict.save_to_disk` writes them,
    with the Hub datasets' columns (imdb: text, label; amazon_polarity: label, title, content).
    Some words are only in the IMDB reviews (`MOVIE_WORDS`), others only in the Amazon ones."""
    from datasets import Dataset, DatasetDict

    rng = np.random.default_rng(seed)

    def imdb_split(n):
        labels = [i % 2 for i in range(n)]
        return Dataset.from_dict({"text": [_review(rng, y, int(rng.integers(3, 30))) for y in labels],
                                  "label": labels})

    DatasetDict({"train": imdb_split(n_train), "test": imdb_split(n_test)}).save_to_disk(str(Path(root) / "imdb"))
    labels = [i % 2 for i in range(n_amazon)]
    amazon = Dataset.from_dict({"label": labels, "title": [f"Title {i}" for i in range(n_amazon)],
                                "content": [_review(rng, y, int(rng.integers(3, 30)), PRODUCT_WORDS)
                                            for y in labels]})
    DatasetDict({"train": amazon}).save_to_disk(str(Path(root) / "amazon_polarity"))
    return Path(root)


def write_image_folder(folder: Path, classes: list[str], per_class: int, size: int = 64,
                       nested: bool = False, seed: int = 0, grey_every: int = 0) -> list[Path]:
    """`folder/<class>/[images/]img_<i>.JPEG`, real JPEG files; class c carries a learnable
    signal (its red channel level). Every `grey_every`-th file is single-channel, as some
    Tiny-ImageNet files are."""
    from torchvision.io import write_jpeg
    import torch

    rng = np.random.default_rng(seed)
    paths = []
    for c, name in enumerate(classes):
        target = Path(folder) / name / ("images" if nested else "")
        target.mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            img = torch.from_numpy(rng.integers(0, 256, size=(3, size, size), dtype=np.uint8))
            img[0] = 20 + 200 * c // max(len(classes) - 1, 1)
            if grey_every and i % grey_every == 0:
                img = img[:1] // 2 + img[1:2] // 2  # grey, still distinct and carrying the signal
            path = target / f"{name}_{i}.JPEG"
            write_jpeg(img, str(path), quality=95)
            paths.append(path)
    return paths


def write_tiny_imagenet(root: Path, n_classes: int = 4, train_per_class: int = 10, val_per_class: int = 3,
                        seed: int = 0) -> Path:
    """`root/tiny-imagenet-200/` as the official archive extracts: wnids.txt,
    train/<wnid>/images/*.JPEG, val/images/*.JPEG with val/val_annotations.txt."""
    folder = Path(root) / "tiny-imagenet-200"
    wnids = [f"n{1000 + i:08d}" for i in range(n_classes)]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "wnids.txt").write_text("\n".join(wnids) + "\n")
    write_image_folder(folder / "train", wnids, train_per_class, nested=True, seed=seed, grey_every=7)
    staging = folder / "val_staging"
    files = write_image_folder(staging, wnids, val_per_class, seed=seed + 1)
    (folder / "val" / "images").mkdir(parents=True, exist_ok=True)
    lines = []
    for i, path in enumerate(files):
        name = f"val_{i}.JPEG"
        path.rename(folder / "val" / "images" / name)
        lines.append(f"{name}\t{path.parent.name}\t0\t0\t63\t63")
    (folder / "val" / "val_annotations.txt").write_text("\n".join(lines) + "\n")
    for sub in staging.iterdir():
        sub.rmdir()
    staging.rmdir()
    return Path(root)


SUBJECTS = ["The cat", "A dog", "The man", "A woman", "The child", "A bird"]
ACTIONS = ["sat on the mat", "ran in the park", "ate an apple", "read a book", "sang a song"]


def _nli_pair(rng, label: int) -> tuple[str, str]:
    subject, action = str(rng.choice(SUBJECTS)), str(rng.choice(ACTIONS))
    premise = f"{subject} {action}."
    if label == 0:      # entailment
        hypothesis = f"{subject} {action}."
    elif label == 1:    # neutral
        hypothesis = f"{subject} was happy."
    else:               # contradiction
        hypothesis = f"{subject} did not move."
    return premise, hypothesis


def write_mnli_and_snli(root: Path, n_train: int = 45, n_dev: int = 30, n_snli: int = 30, seed: int = 0) -> Path:
    """`root/mnli` (train, validation_matched) and `root/snli` (train, with some -1 labels) as
    `DatasetDict.save_to_disk` writes them, with the Hub datasets' columns."""
    from datasets import Dataset, DatasetDict

    rng = np.random.default_rng(seed)

    def split(n, unlabeled=0):
        labels = [i % 3 for i in range(n)] + [-1] * unlabeled
        pairs = [_nli_pair(rng, max(y, 0)) for y in labels]
        return Dataset.from_dict({"premise": [p for p, _ in pairs], "hypothesis": [h for _, h in pairs],
                                  "label": labels, "idx": list(range(len(labels)))})

    DatasetDict({"train": split(n_train), "validation_matched": split(n_dev),
                 "validation_mismatched": split(n_dev)}).save_to_disk(str(Path(root) / "mnli"))
    DatasetDict({"train": split(n_snli, unlabeled=4)}).save_to_disk(str(Path(root) / "snli"))
    return Path(root)


def write_tiny_roberta(folder: Path, hidden: int = 32, layers: int = 2, max_positions: int = 130) -> Path:
    """A RoBERTa masked LM of random weights with a byte-level BPE tokenizer trained here on the
    fixture sentences (special tokens at RoBERTa's ids: <s> 0, <pad> 1, </s> 2, <unk> 3, <mask> 4),
    both written with save_pretrained - the layout of a downloaded roberta-base."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import RobertaConfig, RobertaForMaskedLM, RobertaTokenizer

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    corpus = [f"{s} {a}. {s.lower()} was happy? Yes, No, Maybe, did not move."
              for s in SUBJECTS for a in ACTIONS] + [" Yes", " No", " Maybe"]
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(corpus, vocab_size=400, min_frequency=1,
                            special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    bpe.save_model(str(folder))
    vocab = json.loads((folder / "vocab.json").read_text())
    merges = [tuple(line.split()) for line in (folder / "merges.txt").read_text().splitlines()
              if line.strip() and not line.startswith("#")]
    tokenizer = RobertaTokenizer(vocab=vocab, merges=merges)
    tokenizer.save_pretrained(str(folder))
    config = RobertaConfig(vocab_size=len(tokenizer), hidden_size=hidden, num_hidden_layers=layers,
                           num_attention_heads=2, intermediate_size=2 * hidden,
                           max_position_embeddings=max_positions, pad_token_id=1, bos_token_id=0,
                           eos_token_id=2, type_vocab_size=1)
    import torch

    torch.manual_seed(0)
    RobertaForMaskedLM(config).save_pretrained(str(folder))
    return folder


def write_mnist_raw(root: Path, name: str = "MNIST", n_train: int = 100, n_test: int = 30, size: int = 28,
                    seed: int = 0) -> np.ndarray:
    """`root/<name>/raw/` as torchvision's MNIST family reads it: the four uncompressed idx files
    (big-endian magic 0x803 / 0x801, then the sizes, then uint8 pixels or labels). Class c's
    images have their first row at 25 c. Returns the training images [n_train, size, size]."""
    import struct

    rng = np.random.default_rng(seed)
    folder = Path(root) / name / "raw"
    folder.mkdir(parents=True, exist_ok=True)
    train_images = None
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        labels = (np.arange(n) % 10).astype(np.uint8)
        images = rng.integers(0, 256, size=(n, size, size), dtype=np.uint8)
        images[:, 0, :] = (labels * 25)[:, None]
        header = struct.pack(">IIII", 0x803, n, size, size)
        (folder / f"{prefix}-images-idx3-ubyte").write_bytes(header + images.tobytes())
        (folder / f"{prefix}-labels-idx1-ubyte").write_bytes(struct.pack(">II", 0x801, n) + labels.tobytes())
        train_images = images if prefix == "train" else train_images
    return train_images


def write_food101(root: Path, classes: list[str], train_per_class: int = 6, test_per_class: int = 2,
                  seed: int = 0) -> Path:
    """`root/food-101/` as its archive extracts: meta/classes.txt, meta/train.json and
    meta/test.json ({class: ["class/id", ...]}) and images/<class>/<id>.jpg, real JPEGs of
    differing sizes (as Food-101's are)."""
    import torch
    from torchvision.io import write_jpeg

    rng = np.random.default_rng(seed)
    folder = Path(root) / "food-101"
    (folder / "meta").mkdir(parents=True, exist_ok=True)
    (folder / "meta" / "classes.txt").write_text("\n".join(classes) + "\n")
    for split, per_class in (("train", train_per_class), ("test", test_per_class)):
        listing = {}
        for c, name in enumerate(classes):
            (folder / "images" / name).mkdir(parents=True, exist_ok=True)
            listing[name] = []
            for i in range(per_class):
                h, w = int(rng.integers(20, 40)), int(rng.integers(20, 40))
                img = torch.from_numpy(rng.integers(0, 256, size=(3, h, w), dtype=np.uint8))
                img[1] = 30 + 80 * c
                write_jpeg(img, str(folder / "images" / name / f"{split}{i}.jpg"), quality=95)
                listing[name].append(f"{name}/{split}{i}")
        (folder / "meta" / f"{split}.json").write_text(json.dumps(listing))
    return Path(root)


MIXED = ["but", "though", "partly", "some"]


def write_saved_text(path: Path, n_train: int = 60, n_validation: int = 24, n_test: int = 12, seed: int = 0) -> Path:
    """A sentiment data set as `DatasetDict.save_to_disk` writes it, shaped like GLUE SST-2: splits
    train / validation / test, columns sentence, label (ClassLabel negative, positive, mixed) and
    idx; half the test labels are -1 (no gold label). Every training sentence has its own word
    `docN`, so that encoded rows are distinct."""
    from datasets import ClassLabel, Dataset, DatasetDict, Features, Value

    rng = np.random.default_rng(seed)
    features = Features({"sentence": Value("string"), "label": ClassLabel(names=["negative", "positive", "mixed"]),
                         "idx": Value("int32")})

    def sentence(label: int) -> str:
        if label == 2:
            return f"{_review(rng, 1, 8)} {' '.join(rng.choice(MIXED, size=3))} {_review(rng, 0, 8)}"
        return _review(rng, label, int(rng.integers(5, 20)))

    def split(n, tag, unlabelled=False):
        labels = [i % 3 for i in range(n)]
        texts = [f"{sentence(y)} doc{tag}{i}" for i, y in enumerate(labels)]
        if unlabelled:
            labels = [y if i % 2 else -1 for i, y in enumerate(labels)]
        return Dataset.from_dict({"sentence": texts, "label": labels, "idx": list(range(n))}, features=features)

    DatasetDict({"train": split(n_train, "t"), "validation": split(n_validation, "v"),
                 "test": split(n_test, "x", unlabelled=True)}).save_to_disk(str(path))
    return Path(path)


def write_saved_pairs(path: Path, n_train: int = 45, n_test: int = 15, seed: int = 0) -> Path:
    """A sentence-pair data set saved with `save_to_disk` whose labels are strings (no ClassLabel):
    columns premise, hypothesis, label in {entailment, neutral, contradiction}."""
    from datasets import Dataset, DatasetDict

    rng = np.random.default_rng(seed)
    names = ["entailment", "neutral", "contradiction"]

    def split(n):
        labels = [i % 3 for i in range(n)]
        pairs = [_nli_pair(rng, y) for y in labels]
        return Dataset.from_dict({"premise": [p for p, _ in pairs], "hypothesis": [h for _, h in pairs],
                                  "label": [names[y] for y in labels]})

    DatasetDict({"train": split(n_train), "test": split(n_test)}).save_to_disk(str(path))
    return Path(path)
