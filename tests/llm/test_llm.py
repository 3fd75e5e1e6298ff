"""The LLM settings (DPZero / DP-ZO): prompts on hand-checked examples, label-word scores against
the full LM head, LoRA (only adapters trained), engine equality, samplers and data seeds, missing
data, and tiny runs through the training entry (SQuAD's metric: tests/text/test_squad_metric.py).
Models are tiny OPT / LLaMA-style / RoBERTa ones built from configs, with tokenizers trained here."""
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import typed_section
from fixtures import write_mnli_and_snli, write_tiny_roberta
from llm_fixtures import write_squad, write_sst2, write_tiny_causal_lm
from model_checks import check_engines_and_per_example_grads
from pazo.data.prompt_tasks import PromptTaskSchema, encode_causal, encode_squad_example, load_prompt_bundle
from pazo.data.base import TensorSplit
from pazo.errors import ConfigError, DataMissingError
from pazo.models.functional import FunctionalModel
from pazo.models.hf_lm import HfCausalLmSchema, build_hf_lm_task
from pazo.pretrained import load_pretrained
from pazo.rng import RandomStreams
from pazo.train import run

pytestmark = pytest.mark.llm


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("llm")
    write_tiny_causal_lm(root / "opt")
    write_tiny_causal_lm(root / "llama", "llama")
    write_sst2(root)
    write_sst2(root, name="sst2_public", seed=1)
    write_squad(root)
    write_mnli_and_snli(root)
    write_tiny_roberta(root / "roberta")
    return root


def model_cfg(path, **kw):
    base = {"path": str(path), "download": False, "random_init": False, "dtype": "float32", "attention": "eager",
            "device_map": None, "dropout": None, "lora": {"enabled": False, "rank": 4, "alpha": 8, "dropout": 0.0,
                                                           "target_modules": None},
            "task": "sst2", "label_words": None, "stop": "\n", "max_new_tokens": 8}
    base.update(kw)
    return typed_section(HfCausalLmSchema, base)


def data_cfg(root, **kw):
    base = {"task": "sst2", "root": str(root), "download": False, "model_kind": "hf_causal_lm", "data_seed": 13,
            "k_shot": None, "n_train": 20, "val_k_shot": None, "n_val": 6, "test_size": None, "max_length": 256,
            "label_words": None, "public_source": "none", "public_per_class": None, "public_size": None,
            "public_folder": None, "public_split": "train", "public_columns": None}
    base.update(kw)
    return typed_section(PromptTaskSchema, base)


def test_sst2_causal_prompt_on_a_hand_checked_example(root):
    tok = load_pretrained(str(root / "opt"), "tokenizer")
    ids = encode_causal(tok, "a great movie, so. It was", 256)
    assert tok.decode(ids) == "</s>a great movie, so. It was" and ids[0] == tok.bos_token_id == 2
    data = load_prompt_bundle(data_cfg(root), RandomStreams(0), tok)
    row = data.private.inputs[0]
    text = tok.decode(row[row != tok.pad_token_id])
    assert text.startswith("</s>") and text.endswith(". It was")
    assert data.info["label_words"] == {"negative": " terrible", "positive": " great"}
    cut = encode_causal(tok, "a great movie, so. It was", 4)                # too long: the front goes
    assert len(cut) == 4 and cut[0] == 2 and tok.decode(cut[1:]).endswith("It was")


def test_squad_prompt_on_a_hand_checked_example(root):
    tok = load_pretrained(str(root / "opt"), "tokenizer")
    ids, n = encode_squad_example(tok, "Alice story", "Alice lived in Paris.", "Where did Alice live? ", "Paris", 256)
    assert tok.decode(ids[:n]) == ("</s>Title: Alice story\nContext: Alice lived in Paris.\n"
                                   "Question: Where did Alice live?\nAnswer:")
    assert tok.decode(ids[n:]) == " Paris\n"
    data = load_prompt_bundle(data_cfg(root, task="squad", n_train=10, n_val=None, test_size=4), RandomStreams(0), tok)
    x, _ = data.private.batch(np.arange(3))
    assert x.shape[1] == 2 and data.private.class_histogram(1) == []
    for i in range(3):
        answer = x[i, 0][x[i, 1] == 1]
        assert tok.decode(answer).endswith("\n")
        assert tok.decode(x[i, 0, :data.private.prompt_lengths[i]]).endswith("Answer:")
    assert len(data.test) == 4 and all(len(a) == 2 for a in data.test.answers)


def test_samplers_data_seeds_and_class_counts(root):
    tok = load_pretrained(str(root / "opt"), "tokenizer")
    a = load_prompt_bundle(data_cfg(root), RandomStreams(0), tok)
    b = load_prompt_bundle(data_cfg(root), RandomStreams(5), tok)          # the data seed decides, not the run seed
    c = load_prompt_bundle(data_cfg(root, data_seed=21), RandomStreams(0), tok)
    assert (len(a.private), len(a.val), len(a.test)) == (20, 6, 20)
    assert torch.equal(a.private.inputs, b.private.inputs) and not torch.equal(a.private.inputs, c.private.inputs)
    k = load_prompt_bundle(data_cfg(root, n_train=None, k_shot=7, n_val=None, val_k_shot=3), RandomStreams(0), tok)
    assert torch.bincount(k.private.labels).tolist() == [7, 7] and torch.bincount(k.val.labels).tolist() == [3, 3]
    with pytest.raises(ConfigError, match="only"):
        load_prompt_bundle(data_cfg(root, n_train=None, k_shot=31), RandomStreams(0), tok)
    with pytest.raises(ConfigError, match="not both"):
        load_prompt_bundle(data_cfg(root, k_shot=3), RandomStreams(0), tok)
    pub = load_prompt_bundle(data_cfg(root, public_source="split", public_per_class=4), RandomStreams(0), tok)
    assert pub.public.class_histogram(2) == [4, 4]
    folder = load_prompt_bundle(data_cfg(root, public_source="folder", public_folder=str(root / "sst2_public"),
                                         public_size=10), RandomStreams(0), tok)
    assert len(folder.public) == 10 and folder.info["public"].endswith("sst2_public")


def test_missing_data_is_one_clear_message(root, tmp_path):
    tok = load_pretrained(str(root / "opt"), "tokenizer")
    with pytest.raises(DataMissingError, match=r"sst2 is missing: no saved Hugging Face dataset at .*download=true"):
        load_prompt_bundle(data_cfg(tmp_path), RandomStreams(0), tok)
    with pytest.raises(DataMissingError, match="model.download=true"):
        build_hf_lm_task(model_cfg(tmp_path / "nowhere"), "causal")


@pytest.mark.parametrize("family", ["opt", "llama"])
def test_label_word_scores_equal_the_full_lm_head_and_ignore_padding(root, family):
    torch.manual_seed(0)
    model = build_hf_lm_task(model_cfg(root / family), "causal").eval()
    tok = model.tokenizer
    rows = [encode_causal(tok, t, 64) for t in ["a great movie, so. It was", "boring and dull. It was"]]
    pad = model.pad_id
    ids = torch.full((2, max(map(len, rows))), pad)
    for i, r in enumerate(rows):
        ids[i, :len(r)] = torch.tensor(r)
    logits = model(ids)
    words = [tok.encode(w, add_special_tokens=False)[0] for w in (" terrible", " great")]
    for i, r in enumerate(rows):
        full = model.lm(input_ids=torch.tensor([r])).logits[0, -1]
        assert torch.allclose(logits[i], full[words], atol=1e-5)
    padded = torch.cat([ids, torch.full((2, 3), pad)], dim=1)
    assert torch.allclose(model(padded), logits, atol=1e-5)


def test_masked_lm_generalises_the_roberta_prompt_model(root):
    torch.manual_seed(0)
    model = build_hf_lm_task(model_cfg(root / "roberta", task="mnli"), "masked").eval()
    tok = model.tokenizer
    data = load_prompt_bundle(data_cfg(root, task="mnli", model_kind="hf_masked_lm", n_train=None, k_shot=2, n_val=None,
                                       test_size=5), RandomStreams(0), tok)
    x, _ = data.test.batch(np.arange(5))
    assert tok.decode(x[0][x[0] != tok.pad_token_id]).startswith("<s>")
    assert (x == tok.mask_token_id).sum(1).tolist() == [1] * 5
    full = model.mlm(input_ids=x, attention_mask=(x != tok.pad_token_id).long()).logits
    at = (x == tok.mask_token_id).nonzero()
    assert torch.allclose(model(x), full[at[:, 0], at[:, 1]][:, model.label_word_ids], atol=1e-5)
    model.roberta_head = False                                           # the generic path: full head, columns taken
    assert torch.allclose(model(x), full[at[:, 0], at[:, 1]][:, model.label_word_ids], atol=1e-5)


def half_precision_batch(model, root, family):
    """A small batch for each kind of task: label words (causal), answer NLL (squad), masked LM."""
    tok = model.tokenizer
    if family == "roberta":
        data = load_prompt_bundle(data_cfg(root, task="mnli", model_kind="hf_masked_lm", n_train=None, k_shot=2,
                                           n_val=None, test_size=3), RandomStreams(0), tok)
        return data.test.batch(np.arange(3))
    rows = [encode_causal(tok, t, 64) for t in ["a great movie, so. It was", "boring and dull. It was"]]
    ids = torch.full((2, max(map(len, rows))), model.pad_id)
    for i, r in enumerate(rows):
        ids[i, :len(r)] = torch.tensor(r)
    if model.task == "generation":                                  # [B, 2, L]: ids and the answer mask
        return torch.stack([ids, (torch.arange(ids.shape[1]) >= 4).long().expand_as(ids)], dim=1), torch.zeros(2)
    return ids, torch.tensor([1, 0])


@pytest.mark.parametrize("family, task", [("opt", "sst2"), ("llama", "sst2"), ("opt", "squad"), ("roberta", "mnli")])
def test_half_precision_queries_run_on_the_fly_for_each_model_kind(root, family, task):
    """Every trainable weight of these models is read by its own module's forward (the label-word
    head included), so the engine's check finds no direct read and the on-the-fly losses are the
    exact shift's, bit for bit."""
    from pazo.models.functional import FunctionalModel
    from pazo.zo.directions import SeededDirections
    from pazo.zo.engines import InPlaceEngine
    from pazo.zo.half_precision import ExactShift

    torch.manual_seed(0)
    module = build_hf_lm_task(model_cfg(root / family, task=task, dtype="float16"),
                              "masked" if family == "roberta" else "causal").eval()   # as the engine queries
    model = FunctionalModel(module, **({"loss_fn": module.loss_fn} if hasattr(module, "loss_fn") else {}))
    x, y = half_precision_batch(module, root, family)
    points = [(0, 1e-2), (0, -1e-2)]
    make = lambda: SeededDirections(model.shapes, [11], dtype=torch.float16)  # noqa: E731
    engine = InPlaceEngine()
    got = engine.losses(model, x, y, make(), points)
    shifter, expected = ExactShift(model.params), []
    with torch.no_grad():
        for j, s in points:
            shifter.shift(make(), j, s)
            expected.append(model.current_losses(x, y))
        shifter.restore()
    assert engine.half_precision_queries.startswith("on the fly"), engine.half_precision_queries
    assert torch.equal(got, torch.stack(expected)) and not torch.equal(got[0], got[1])


def test_lora_trains_only_the_adapters(root, make_method):
    torch.manual_seed(0)
    module = build_hf_lm_task(model_cfg(root / "opt", lora={"enabled": True, "rank": 4, "alpha": 8, "dropout": 0.0,
                                                           "target_modules": None}), "causal")
    model = FunctionalModel(module, loss_fn=module.loss_fn)
    assert model.names and all("lora_" in n for n in model.names)
    assert any("q_proj" in n for n in model.names) and any("v_proj" in n for n in model.names)
    frozen = {n: p.detach().clone() for n, p in module.named_parameters() if not p.requires_grad}
    adapters = [p.detach().clone() for p in model.params]
    tok = module.tokenizer
    x = torch.tensor([encode_causal(tok, "a great movie, so. It was", 32)] * 4)
    method = make_method("dpzero", model, {"lr": 1e-2, "clip": 1.0, "q": 2}, sigma=1.0, b=4, engine="inplace")
    method.step(x, torch.tensor([1, 1, 0, 0]), 1)
    assert all(torch.equal(p, frozen[n]) for n, p in module.named_parameters() if not p.requires_grad)
    assert any(not torch.equal(a, p) for a, p in zip(adapters, model.params))


@pytest.mark.parametrize("task", ["sst2", "squad"])
def test_engines_agree_and_per_example_grads_in_float32(root, task):
    torch.manual_seed(0)
    module = build_hf_lm_task(model_cfg(root / "opt", task=task), "causal")
    model = FunctionalModel(module, loss_fn=module.loss_fn)
    tok = load_pretrained(str(root / "opt"), "tokenizer")
    data = load_prompt_bundle(data_cfg(root, task=task, n_train=8, n_val=None, test_size=4), RandomStreams(0), tok)
    x, y = data.private.batch(np.arange(3))
    check_engines_and_per_example_grads(model, x, y, chunk=2)


def run_cfg(hydra_cfg, root, *extra, model="opt", sigma=5.0):
    return hydra_cfg("model=hf_causal_lm", f"model.path={root / model}", f"dataset.root={root}",
                     "model.attention=eager",
                     "dataset.n_train=24", "dataset.n_val=6", "train.batch_size=8", "train.evals_per_epoch=1",
                     *([f"privacy.sigma={sigma}"] if sigma else []), *extra)  # given sigma (checked): no calibration


def test_tiny_runs_of_the_sst2_setting(root, hydra_cfg, tmp_path):
    s = run(run_cfg(hydra_cfg, root, "dataset=sst2", "method=dpzero", "engine.name=inplace"), tmp_path / "dpzero")
    assert s["status"] == "finished" and s["privacy"]["within_budget"] and s["data"]["task"] == "sst2"
    assert s["final_test_accuracy"] is not None and s["data"]["n_val"] == 6
    s = run(run_cfg(hydra_cfg, root, "dataset=sst2", "method=mezo", "privacy=none", "model.dtype=float16",
                    "engine.name=inplace", model="llama", sigma=None), tmp_path / "mezo")
    assert s["status"] == "finished" and s["engine"]["half_precision_queries"].startswith("on the fly")
    s = run(run_cfg(hydra_cfg, root, "dataset=sst2", "method=pazo_m", "dataset.public_source=split",
                    "dataset.public_size=8", "method.public_batch_size=4", "model.lora.enabled=true"),
            tmp_path / "pazo_m")
    assert s["status"] == "finished" and s["data"]["n_public"] == 8 and s["dim"] < 2000


def test_tiny_run_of_the_squad_setting(root, hydra_cfg, tmp_path):
    s = run(run_cfg(hydra_cfg, root, "dataset=squad", "method=dpzero", "engine.name=inplace", "dataset.test_size=4",
                    "dataset.max_new_tokens=4", "model.lora.enabled=true"), tmp_path / "squad")
    assert s["status"] == "finished" and s["privacy"]["within_budget"]
    metrics = s["final_test_metrics"]
    assert set(metrics) == {"accuracy", "f1", "exact_match", "loss"} and metrics["accuracy"] == metrics["f1"]
    assert 0 <= metrics["exact_match"] <= metrics["f1"] <= 1 and s["warnings"] == []


def test_tiny_run_of_a_glue_task_with_the_masked_lm(root, hydra_cfg, tmp_path):
    s = run(hydra_cfg("model=hf_masked_lm", f"model.path={root / 'roberta'}", "dataset=glue_prompt",
                      "dataset.task=mnli", f"dataset.root={root}", "dataset.k_shot=4", "dataset.test_size=6",
                      "train.batch_size=6", "method=dpzero", "privacy.sigma=5.0"), tmp_path / "mnli")
    assert s["status"] == "finished" and s["data"]["label_words"]["contradiction"] == " No"


def test_mismatched_model_and_data_are_refused_before_compute(root, hydra_cfg, tmp_path):
    with pytest.raises(ConfigError, match="answered by generation"):
        run(hydra_cfg("model=hf_masked_lm", "dataset=squad"), tmp_path / "a")
    with pytest.raises(ConfigError, match="prompted task"):
        run(hydra_cfg("model=hf_causal_lm", "dataset=digits"), tmp_path / "b")
    with pytest.raises(ConfigError, match="model.dtype"):
        run(hydra_cfg("model=hf_causal_lm", "dataset=sst2", "model.dtype=float8"), tmp_path / "c")


def test_dpsgd_with_lora_clips_per_example_adapter_gradients(root, hydra_cfg, tmp_path):
    s = run(run_cfg(hydra_cfg, root, "dataset=sst2", "method=dpsgd", "model.lora.enabled=true"), tmp_path / "dpsgd")
    assert s["status"] == "finished" and s["privacy"]["within_budget"] and s["dim"] < 2000


def test_full_parameter_dpsgd_is_refused_when_one_example_overflows_the_budget(root, hydra_cfg, tmp_path):
    # the tiny OPT has ~19k parameters: 0.2 MB per example (3 copies); a 0.1 MB budget cannot hold one
    with pytest.raises(ConfigError, match=r"full-parameter DP-SGD does not fit; train LoRA adapters"):
        run(run_cfg(hydra_cfg, root, "dataset=sst2", "method=dpsgd", "method.grad_memory_mb=0.1"), tmp_path / "no")
    s = run(run_cfg(hydra_cfg, root, "dataset=sst2", "method=dpsgd", "method.grad_memory_mb=0.1",
                    "model.lora.enabled=true"), tmp_path / "lora")               # the adapters fit
    assert s["status"] == "finished"


def test_device_map_places_the_model_and_the_zeroth_order_step_runs_unchanged(root, make_method):
    """Only CPU here: an explicit accelerate device map over the CPU (model.device_map=auto spreads
    a model over the GPUs of a node the same way); `place` leaves a dispatched model where it is."""
    from pazo.models import place

    torch.manual_seed(0)
    module = build_hf_lm_task(model_cfg(root / "opt", device_map={"": "cpu"}), "causal")
    assert module.lm.hf_device_map == {"": "cpu"} and place(module, torch.device("meta")) is module
    model = FunctionalModel(module, loss_fn=module.loss_fn)
    before = model.flat_params()
    x = torch.tensor([encode_causal(module.tokenizer, "a great movie, so. It was", 32)] * 4)
    make_method("dpzero", model, {"lr": 1e-2, "clip": 1.0}, sigma=1.0, b=4, engine="inplace").step(
        x, torch.tensor([1, 1, 0, 0]), 1)
    assert not torch.equal(before, model.flat_params())


def check_private_run(s, method):
    """A finished private run: finite training loss, epsilon spent within the target, a test score
    in range and the summary's fields."""
    p = s["privacy"]
    assert s["status"] == "finished" and s["method"] == method
    assert all(w.startswith("chance_level") for w in s["warnings"])     # a random tiny model is at chance
    assert p["within_budget"] and 0 < p["epsilon_spent"] <= p["target_epsilon"]
    assert np.isfinite(s["final_test_loss"]) and 0 <= s["final_test_accuracy"] <= 1
    rows = [json.loads(line) for line in (Path(s["run_dir"]) / "metrics.jsonl").read_text().splitlines()]
    losses = [r["train_loss"] for r in rows if "train_loss" in r]
    assert losses and all(np.isfinite(losses)) and rows[-1]["epsilon"] <= p["target_epsilon"]
    assert s["engine"]["name"] == "inplace" and s["parameter_devices"] == ["cpu"]


PUBLIC = ("dataset.public_source=split", "dataset.public_size=8", "method.public_batch_size=4")


@pytest.mark.parametrize("method, extra", [
    ("dp_zo", ("method.q=2",)),
    ("pazo_p", (*PUBLIC, "method.k=2")),
    ("pazo_s", (*PUBLIC, "method.k=2")),
])
def test_tiny_runs_of_dp_zo_pazo_p_and_pazo_s_on_the_sst2_setting(root, hydra_cfg, tmp_path, method, extra):
    s = run(run_cfg(hydra_cfg, root, "dataset=sst2", f"method={method}", "engine.name=inplace", *extra),
            tmp_path / method)
    check_private_run(s, method)
    assert s["data"]["task"] == "sst2" and s["data"]["n_public"] == (8 if method != "dp_zo" else 0)


def test_tiny_float16_run_of_dp_aggzo_on_the_sst2_setting(root, hydra_cfg, tmp_path):
    """The authors' OPT setting in miniature: float16 weights, in-place queries built on the fly (the
    parameters never written between queries), K = 3 directions jointly clipped."""
    s = run(run_cfg(hydra_cfg, root, "dataset=sst2", "method=dp_aggzo", "method.q=3", "model.dtype=float16",
                    "engine.name=inplace"), tmp_path / "dp_aggzo")
    check_private_run(s, "dp_aggzo")
    assert s["engine"]["half_precision_queries"].startswith("on the fly") and s["privacy"]["queries"] == 3


def test_tiny_run_of_dp_zo_on_the_squad_setting(root, hydra_cfg, tmp_path):
    s = run(run_cfg(hydra_cfg, root, "dataset=squad", "method=dp_zo", "engine.name=inplace", "dataset.test_size=4",
                    "dataset.max_new_tokens=4", "model.lora.enabled=true"), tmp_path / "squad")
    check_private_run(s, "dp_zo")
    metrics = s["final_test_metrics"]
    assert set(metrics) == {"accuracy", "f1", "exact_match", "loss"} and metrics["accuracy"] == metrics["f1"]
    assert 0 <= metrics["exact_match"] <= metrics["f1"] <= 1 and np.isfinite(metrics["loss"])


@pytest.mark.parametrize("method, cfg", [
    ("dp_zo", {"lr": 1e-2, "clip": 0.02, "q": 2}),
    ("dp_aggzo", {"lr": 1e-2, "clip": 1.0, "q": 3}),
    ("pazo_m", {"lr": 1e-2, "clip": 1.0, "public_batch_size": 4}),
    ("pazo_p", {"lr": 1e-2, "clip": 1.0, "k": 2, "public_batch_size": 4}),
    ("pazo_s", {"lr": 1e-2, "clip": 1.0, "k": 2, "public_batch_size": 4}),
])
def test_the_llm_methods_move_the_adapters_and_nothing_else(root, make_method, method, cfg):
    """One step of each method on the tiny OPT with LoRA: some adapter moves (by a finite amount),
    the frozen base model does not."""
    torch.manual_seed(0)
    module = build_hf_lm_task(model_cfg(root / "opt", lora={"enabled": True, "rank": 4, "alpha": 8, "dropout": 0.0,
                                                           "target_modules": None}), "causal")
    model = FunctionalModel(module, loss_fn=module.loss_fn)
    tok = load_pretrained(str(root / "opt"), "tokenizer")
    data = load_prompt_bundle(data_cfg(root, public_source="split", public_size=8), RandomStreams(0), tok)
    x, y = data.private.batch(np.arange(4))
    frozen = {n: p.detach().clone() for n, p in module.named_parameters() if not p.requires_grad}
    adapters = [p.detach().clone() for p in model.params]
    stats = make_method(method, model, cfg, sigma=1.0, b=4, public=data.public, engine="inplace").step(x, y, 1)
    assert np.isfinite(stats["loss"])
    assert all(torch.equal(p, frozen[n]) for n, p in module.named_parameters() if not p.requires_grad)
    moved = [not torch.equal(a, p) for a, p in zip(adapters, model.params)]
    assert any(moved) and model.all_finite()


@pytest.mark.parametrize("model_name,family,other", [("hf_causal_lm", "AutoModelForCausalLM", "AutoModelForMaskedLM"),
                                                     ("hf_masked_lm", "AutoModelForMaskedLM", "AutoModelForCausalLM")])
@pytest.mark.parametrize("download", [False, True])
def test_a_missing_model_is_one_message_for_its_own_family(tmp_path, monkeypatch, model_name, family, other, download):
    """The OPT settings' missing model gave the RoBERTa recipe (the data side's tokenizer loader ran
    first with a fixed masked-LM recipe), and an offline model.download=true still advised it: the
    message, whichever loader meets the absence first, names this model's family, its folder, and
    says a download that was asked for failed."""
    from pazo.data import DATASETS
    from pazo.rng import RandomStreams

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    where = tmp_path / "nowhere" / "opt-1.3b"
    messages = []
    with pytest.raises(DataMissingError) as data_side:
        DATASETS.get("sst2")(data_cfg(tmp_path, tokenizer=str(where), model_kind=model_name, download=download),
                             RandomStreams(0))
    messages.append((str(data_side.value), "dataset.download"))
    with pytest.raises(DataMissingError) as model_side:
        build_hf_lm_task(model_cfg(where, download=download), "causal" if "causal" in model_name else "masked")
    messages.append((str(model_side.value), "model.download"))
    for message, switch in messages:
        assert family in message and other not in message and "roberta/" not in message
        assert "'opt-1.3b'" in message and "opt-1.3b/ folder" in message and "model.path" in message
        assert (f"get it with {switch}=true" in message) != download
        assert (f"{switch}=true could not fetch it" in message) == download
        assert "\n" not in message
@pytest.mark.parametrize("family,lora", [("opt", False), ("opt", True), ("llama", False), ("roberta", False)])
def test_dpsgd_by_the_ghost_engine_equals_the_per_example_engine(root, make_method, family, lora):
    """A noisy DP-SGD step of the tiny LMs in float64 (full parameters, or LoRA adapters; RoBERTa as
    the MNLI setting's masked LM, its dropout 0: with dropout its fallback's second forward is refused)
    the book-keeping engine's update is the per-example engine's to 1e-10; the tied heads, OPT's
    learned positions and LLaMA's RMSNorm go to the per-example engine, the adapters and projections
    are book-kept."""
    tok = load_pretrained(str(root / family), "tokenizer")
    masked = family == "roberta"
    task = {"task": "mnli", "model_kind": "hf_masked_lm", "k_shot": 2, "n_train": None} if masked else {"n_train": 8}
    data = load_prompt_bundle(data_cfg(root, n_val=None, test_size=4, **task), RandomStreams(0), tok)
    x, y = data.private.batch(np.arange(3))
    updates, blocks = {}, {}
    for engine in ("per_example", "ghost"):
        torch.manual_seed(0)
        adapters = {"enabled": lora, "rank": 2, "alpha": 4, "dropout": 0.0, "target_modules": None}
        own = {"task": "mnli", "dropout": 0.0} if masked else {}
        module = build_hf_lm_task(model_cfg(root / family, lora=adapters, **own), "masked" if masked else "causal")
        module = module.double()
        model = FunctionalModel(module, **({"loss_fn": module.loss_fn} if hasattr(module, "loss_fn") else {}))
        before = model.flat_params().clone()
        method = make_method("dpsgd", model, {"lr": 0.1, "clip": 0.05, "per_example_chunk": 2,
                                              "clip_engine": engine}, sigma=1.0, b=3, seed=4, public=TensorSplit(x, y))
        method.step(x, y, 1)
        updates[engine], blocks[engine] = model.flat_params() - before, method.clip_engine_block()
    assert float((updates["ghost"] - updates["per_example"]).abs().max()) <= 1e-10
    ghost = blocks["ghost"]["engine"]["clip_engine"]
    assert ghost["used"] == "ghost" and len(ghost["per_example_parameters"]) < len(model.names)
    if lora:
        assert ghost["per_example_parameters"] == []
