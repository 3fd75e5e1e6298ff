"""MNLI setting: the template and label words on a hand-checked example, k-shot / public / test
sampling on saved-to-disk fixtures, the prompt masked LM (equal to the full MLM head's scores,
padding-invariant, under vmap and both engines), missing-weights messages, and a tiny run
through Hydra. The RoBERTa is a random tiny one with a byte-level BPE tokenizer built here."""
import numpy as np
import pytest
import torch

from conftest import typed_section
from model_checks import check_engines_and_per_example_grads
from fixtures import write_mnli_and_snli, write_tiny_roberta
from pazo.data.mnli import MnliSchema, TrimPadding, encode_pairs, encode_prompt, load_mnli_bundle
from pazo.errors import ConfigError, DataMissingError
from pazo.models import FunctionalModel
from pazo.models.prompt_mlm import build_prompt_mlm, label_word_ids
from pazo.pretrained import load_pretrained
from pazo.train import run

WORDS = [" Yes", " Maybe", " No"]

pytestmark = pytest.mark.llm


@pytest.fixture(scope="module")
def nli_root(tmp_path_factory):
    root = write_mnli_and_snli(tmp_path_factory.mktemp("nli"))
    write_tiny_roberta(root / "roberta")
    return root


@pytest.fixture(scope="module")
def tokenizer(nli_root):
    return load_pretrained(str(nli_root / "roberta"), "tokenizer")


def cfg(root, **kw):
    return typed_section(MnliSchema, {"root": str(root), "download": False, "k_shot": 5, "public_per_class": 3,
                                      "test_size": 10, "max_length": 256, "premise_limit": 240,
                                      "label_words": WORDS, **kw})


def test_template_on_a_hand_checked_example(tokenizer):
    ids = encode_prompt(tokenizer, "The cat sat on the mat.", "A cat is sitting.", 240, 256)
    assert tokenizer.decode(ids) == "<s>The cat sat on the mat?<mask>, a cat is sitting.</s>"
    premise = tokenizer.encode("The cat sat on the mat", add_special_tokens=False)
    question = tokenizer.encode("?", add_special_tokens=False)
    assert ids[0] == tokenizer.cls_token_id and ids[-1] == tokenizer.sep_token_id
    assert ids[1:1 + len(premise)] == premise                      # premise tokenised on its own
    assert ids.index(tokenizer.mask_token_id) == 1 + len(premise) + len(question)
    hypothesis = tokenizer.encode(" a cat is sitting.", add_special_tokens=False)
    assert ids[-1 - len(hypothesis):-1] == hypothesis              # " " + first letter lower-cased


def test_truncation_keeps_mask_and_end(tokenizer):
    long = "The cat sat on the mat " * 30 + "."
    ids = encode_prompt(tokenizer, long, long, premise_limit=20, max_length=40)
    assert len(ids) == 40 and ids[-1] == tokenizer.sep_token_id and ids.count(tokenizer.mask_token_id) == 1
    assert ids.index(tokenizer.mask_token_id) <= 1 + 20 + 1
    with pytest.raises(ConfigError, match="max_length"):
        encode_prompt(tokenizer, long, "x", premise_limit=50, max_length=20)


def test_label_words_are_single_distinct_tokens(tokenizer):
    ids = label_word_ids(tokenizer, WORDS)
    assert [tokenizer.decode([i]) for i in ids] == WORDS
    with pytest.raises(ConfigError, match="tokens"):
        label_word_ids(tokenizer, [" Yes", " zebra-crossing"])


def test_loader_sizes_classes_seeding(nli_root, tokenizer):
    a = load_mnli_bundle(cfg(nli_root), np.random.default_rng(13), tokenizer)
    b = load_mnli_bundle(cfg(nli_root), np.random.default_rng(13), tokenizer)
    c = load_mnli_bundle(cfg(nli_root), np.random.default_rng(21), tokenizer)
    assert (len(a.private), len(a.public), len(a.test)) == (15, 9, 10) and a.num_classes == 3
    assert torch.bincount(a.private.labels).tolist() == [5, 5, 5]
    assert a.describe()["public_class_histogram"] == [3, 3, 3]        # SNLI's -1 rows never drawn
    assert torch.equal(a.private.inputs, b.private.inputs) and torch.equal(a.test.inputs, b.test.inputs)
    assert not torch.equal(a.private.inputs, c.private.inputs)
    assert (a.private.inputs == tokenizer.mask_token_id).sum(1).tolist() == [1] * 15
    with pytest.raises(ConfigError, match="only 15"):
        load_mnli_bundle(cfg(nli_root, k_shot=16), np.random.default_rng(0), tokenizer)


def test_missing_data_and_weights_messages(tmp_path, tokenizer):
    with pytest.raises(DataMissingError, match="mnli is missing.*dataset.download=true"):
        load_mnli_bundle(cfg(tmp_path), np.random.default_rng(0), tokenizer)
    with pytest.raises(DataMissingError, match="save_pretrained") as err:
        load_pretrained(str(tmp_path / "no-such-model"), "model")
    assert "no-such-model" in str(err.value)


def test_trim_padding_drops_only_all_padding_columns(tokenizer):
    ids = encode_pairs(tokenizer, ["The cat sat.", "A dog ran in the park and sang a song."],
                       ["A cat.", "A dog."], 240, 256)
    pad = tokenizer.pad_token_id
    short = TrimPadding(pad)(ids[:1], "cpu")
    assert short.shape[1] == int((ids[0] != pad).sum()) < ids.shape[1]
    assert torch.equal(TrimPadding(pad)(ids, "cpu"), ids)


@pytest.fixture(scope="module")
def prompt_model(nli_root):
    torch.manual_seed(0)
    return build_prompt_mlm(str(nli_root / "roberta"), WORDS, dropout=0.0)


def test_logits_are_the_full_heads_label_word_scores_and_ignore_padding(prompt_model, tokenizer):
    model = prompt_model.eval()
    ids = encode_pairs(tokenizer, ["The cat sat on the mat.", "A dog ran."], ["A cat sat.", "A dog did not move."],
                       240, 256)
    logits = model(ids)
    full = model.mlm(input_ids=ids, attention_mask=(ids != tokenizer.pad_token_id).long()).logits
    at = (ids == tokenizer.mask_token_id).nonzero()
    expected = full[at[:, 0], at[:, 1]][:, label_word_ids(tokenizer, WORDS)]
    assert torch.allclose(logits, expected, atol=1e-5)
    padded = torch.cat([ids, torch.full((2, 5), tokenizer.pad_token_id)], dim=1)
    assert torch.allclose(model(padded), logits, atol=1e-5)


def test_prompt_model_under_vmap_both_engines_and_per_example_grads(prompt_model, tokenizer):
    model = FunctionalModel(prompt_model)
    x = encode_pairs(tokenizer, ["The cat sat.", "A dog ran in the park.", "The man ate.", "A bird sang."],
                     ["A cat.", "A dog ran.", "The man did not move.", "A bird was happy."], 240, 256)
    y = torch.tensor([0, 0, 2, 1])
    check_engines_and_per_example_grads(model, x, y, chunk=3)


@pytest.mark.slow   # a whole run (about 18 s); in the quick suite: the loader, template and prompt-model tests above
def test_tiny_run_of_the_mnli_experiment(nli_root, hydra_cfg, tmp_path):
    c = hydra_cfg("experiment=mnli", "method=pazo_m")
    assert c.model.path == "FacebookAI/roberta-base" and c.dataset.k_shot == 512
    assert list(c.model.label_words) == WORDS and c.method.smoothing == 1.0e-3 and c.method.clip == 50.0
    s = run(hydra_cfg("experiment=mnli", "method=pazo_s", f"dataset.root={nli_root}",
                      f"model.path={nli_root / 'roberta'}", "dataset.k_shot=5", "dataset.public_per_class=3",
                      "dataset.test_size=10", "train.batch_size=8", "method.public_batch_size=4"), tmp_path)
    assert s["status"] == "finished" and s["privacy"]["within_budget"]
    assert s["data"]["n_private"] == 15 and s["data"]["label_words"]["contradiction"] == " No"
