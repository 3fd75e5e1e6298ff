"""dataset=hf_text: saved Hugging Face data sets (save_to_disk) with their splits and columns named
in the config; classes from a ClassLabel or from string labels, sentence pairs, the vocabulary's
source and what the summary says about it, the seeded public split, another saved set as public
data, missing data, and a tiny PAZO-M run of the LSTM through Hydra."""
import numpy as np
import pytest
import torch

from conftest import dataset_node
from fixtures import write_saved_pairs, write_saved_text
from pazo.data.hf_text import load_hf_text_bundle
from pazo.data.text import PAD, UNK
from pazo.errors import ConfigError, DataMissingError
from pazo.train import run


@pytest.fixture(scope="module")
def text_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    write_saved_text(root / "sst", n_train=60)
    write_saved_text(root / "other_reviews", n_train=30, seed=7)
    write_saved_pairs(root / "pairs")
    return root


@pytest.fixture
def text_cfg(hydra_cfg, text_root):
    return dataset_node(hydra_cfg, "dataset=hf_text", "model=lstm", f"dataset.root={text_root}",
                        "dataset.hf_name=sst", "dataset.text_column=sentence", "dataset.test_split=validation",
                        "dataset.max_length=24")


def load(cfg, seed=0):
    return load_hf_text_bundle(cfg, np.random.default_rng(seed))


def test_shapes_and_classes_come_from_the_data(text_cfg):
    data = load(text_cfg("dataset.public_per_class=4"))
    assert data.input_shape == (24,) and data.num_classes == 3 and data.name == "sst"
    assert len(data.private) == 48 and data.public.class_histogram(3) == [4, 4, 4] and len(data.test) == 24
    assert data.private.inputs.shape == (48, 24) and data.private.inputs.dtype == torch.long


def test_vocabulary_is_public_by_default_and_private_is_flagged(text_cfg):
    public = load(text_cfg("dataset.public_per_class=2"))
    # every token of a public text is in a vocabulary counted on the public texts, not so the private ones
    assert not (public.public.inputs == UNK).any() and (public.private.inputs == UNK).any()
    assert public.describe()["vocab_source"] == "public"
    assert not any("vocabulary" in line for line in public.describe()["outside_guarantee"])
    assert any("unlabelled_dropped" in line for line in public.describe()["outside_guarantee"])
    private = load(text_cfg("dataset.public_per_class=2", "dataset.vocab_source=private"))
    assert not (private.private.inputs == UNK).any()
    assert private.describe()["vocab_source"] == "private"
    assert any("does not cover" in line for line in private.describe()["outside_guarantee"])


def test_unlabelled_rows_are_dropped(text_cfg):
    data = load(text_cfg("dataset.test_split=test"))          # half of the 12 test labels are -1
    assert len(data.test) == 6 and (data.test.labels >= 0).all()


def test_seeded_split_reproducible_disjoint_and_imbalanced(text_cfg):
    cfg = text_cfg("dataset.public_fraction=0.5", "dataset.public_imbalance=0.5", "dataset.vocab_source=private")
    a, b, c = load(cfg, 1), load(cfg, 1), load(cfg, 2)
    assert torch.equal(a.public.inputs, b.public.inputs) and not torch.equal(a.public.inputs, c.public.inputs)
    rows = {tuple(r.tolist()) for r in a.public.inputs}        # each training sentence has its own docN word
    assert len(rows) == 30 and not any(tuple(r.tolist()) in rows for r in a.private.inputs)
    hist = a.public.class_histogram(3)
    assert sum(hist) == 30 and min(hist) / max(hist) == pytest.approx(0.5, abs=0.1)
    assert a.info["public_imbalance"] == 0.5 and a.info["public_fraction"] == 0.5


def test_string_labels_and_sentence_pairs(hydra_cfg, text_root):
    cfg = hydra_cfg("dataset=hf_text", "model=lstm", f"dataset.root={text_root}", "dataset.hf_name=pairs",
                    "dataset.text_column=premise", "dataset.text_pair_column=hypothesis", "dataset.max_length=20",
                    "dataset.public_per_class=3", "dataset.vocab_source=private").dataset
    data = load(cfg)
    assert data.num_classes == 3 and len(data.test) == 15 and data.public.class_histogram(3) == [3, 3, 3]
    row = data.test.inputs[0].tolist()
    boundary = row.index(PAD)                                  # premise, one PAD, hypothesis, padding
    assert boundary > 0 and row[boundary + 1] != PAD


def test_another_saved_data_set_as_public_data(text_cfg, text_root):
    data = load(text_cfg("dataset.public_source=folder", f"dataset.public_folder={text_root / 'other_reviews'}",
                         "dataset.public_per_class=2"))
    assert len(data.private) == 60 and data.public.class_histogram(3) == [2, 2, 2]
    assert data.describe()["public"] == str(text_root / "other_reviews")


def test_missing_data_and_wrong_columns(text_cfg, text_root):
    with pytest.raises(DataMissingError) as err:
        load(text_cfg("dataset.hf_name=sst2"))
    msg = str(err.value)
    assert f"no saved Hugging Face dataset at {text_root / 'sst2'}" in msg and "dataset.download=true" in msg
    with pytest.raises(ConfigError, match=r"has no column 'text' \(it has sentence, label, idx\)"):
        load(text_cfg("dataset.text_column=text"))
    with pytest.raises(ConfigError, match=r"no split 'dev' \(it has train, validation, test\)"):
        load(text_cfg("dataset.test_split=dev"))


def test_text_needs_the_lstm(hydra_cfg, text_root, tmp_path):
    with pytest.raises(ConfigError, match="dataset=hf_text is token ids for model=lstm, not model=small_cnn"):
        run(hydra_cfg("dataset=hf_text", f"dataset.root={text_root}", "dataset.hf_name=sst"), tmp_path)


@pytest.mark.slow   # a whole run (about 16 s); in the quick suite: the loader's tests above and
# tests/models/test_imdb.py::test_lstm_under_vmap_both_engines_and_per_example_grads
def test_tiny_pazo_m_run_of_the_lstm(text_root, hydra_cfg, tmp_path):
    s = run(hydra_cfg("dataset=hf_text", "model=lstm", f"dataset.root={text_root}", "dataset.hf_name=sst",
                      "dataset.text_column=sentence", "dataset.test_split=validation", "dataset.max_length=16",
                      "dataset.public_per_class=4", "dataset.vocab_size=50", "model.hidden=8", "model.embed=8",
                      "method=pazo_m", "train.batch_size=16", "method.public_batch_size=8"), tmp_path)
    assert s["status"] == "finished" and s["privacy"]["within_budget"]
    assert s["data"]["n_public"] == 12 and s["data"]["vocab_source"] == "public"
