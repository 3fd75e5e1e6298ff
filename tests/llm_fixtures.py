"""Tiny language models and prompted-task data for the LLM settings, written in the real formats:
tokenizers and configs with `save_pretrained` (a folder with a config and no weights gives random
weights, like a downloaded model's folder less its weights), data sets with `save_to_disk` and the
Hub copies' splits and columns (GLUE SST-2, SQuAD)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

GOOD = ["a great movie", "a wonderful film", "truly moving and fun", "the best story", "great acting"]
BAD = ["a terrible movie", "an awful film", "boring and dull", "the worst story", "bad acting"]
PEOPLE = ["Alice", "Bob", "Carol", "Dave"]
CITIES = ["Paris", "Rome", "Oslo", "Lima"]


def sentence(rng, label: int) -> str:
    return f"{rng.choice(GOOD if label else BAD)}, {rng.choice(['really', 'so', 'quite'])}."


def qa_example(rng, i: int) -> dict:
    person, city = str(rng.choice(PEOPLE)), str(rng.choice(CITIES))
    context = f"{person} lived in {city} for many years. The house of {person} was small."
    answer = city if i % 2 == 0 else f"the city of {city}"
    return {"id": str(i), "title": f"{person} story", "context": context,
            "question": f"Where did {person} live?", "answers": {"text": [answer, city], "answer_start": [0, 0]}}


def corpus() -> list[str]:
    rng = np.random.default_rng(0)
    lines = [f"{sentence(rng, i % 2)} It was great" for i in range(40)]
    lines += [f"{sentence(rng, i % 2)} It was terrible" for i in range(40)]
    for i in range(30):
        ex = qa_example(rng, i)
        lines.append(f"Title: {ex['title']}\nContext: {ex['context']}\nQuestion: {ex['question']}\n"
                     f"Answer: {ex['answers']['text'][0]}\n")
    lines += ['Does this mean that "x" is true? Yes or No?\nYes', "No", " great", " terrible"]
    return lines


def write_tiny_tokenizer(folder: Path, style: str = "opt") -> Path:
    """A byte-level BPE tokenizer trained here. `opt`: `</s>` (id 2) in front of every text, pad
    `<pad>` (1), as OPT's; `llama`: `<s>` (1) in front, no pad token, as LLaMA's."""
    from tokenizers import ByteLevelBPETokenizer
    from tokenizers.processors import TemplateProcessing
    from transformers import PreTrainedTokenizerFast

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    specials = ["<unk>", "<s>", "</s>"] if style == "llama" else ["<s>", "<pad>", "</s>", "<unk>"]
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(corpus(), vocab_size=420, min_frequency=1, special_tokens=specials)
    bos = "<s>" if style == "llama" else "</s>"
    bpe.post_processor = TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A $B",
                                            special_tokens=[(bos, bpe.token_to_id(bos))])
    kwargs = dict(bos_token=bos, eos_token="</s>", unk_token="<unk>")
    if style != "llama":
        kwargs["pad_token"] = "<pad>"
    PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, **kwargs).save_pretrained(str(folder))
    return folder


def write_tiny_causal_lm(folder: Path, family: str = "opt", hidden: int = 16, layers: int = 2,
                         weights: bool = False, seed: int = 0) -> Path:
    """A tokenizer and a config (OPT or LLaMA-style) of a tiny causal LM; with `weights`, random
    weights saved too (as a downloaded model's folder)."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM, OPTConfig, OPTForCausalLM

    folder = write_tiny_tokenizer(folder, "llama" if family == "llama" else "opt")
    tok = AutoTokenizer.from_pretrained(str(folder))
    if family == "llama":
        config = LlamaConfig(vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden,
                             num_hidden_layers=layers, num_attention_heads=2, num_key_value_heads=1,
                             max_position_embeddings=512, bos_token_id=tok.bos_token_id,
                             eos_token_id=tok.eos_token_id, tie_word_embeddings=False)
        cls = LlamaForCausalLM
    else:
        config = OPTConfig(vocab_size=len(tok), hidden_size=hidden, num_hidden_layers=layers, ffn_dim=2 * hidden,
                           num_attention_heads=2, max_position_embeddings=512, word_embed_proj_dim=hidden,
                           pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
                           eos_token_id=tok.eos_token_id, dropout=0.0, attention_dropout=0.0)
        cls = OPTForCausalLM
    if weights:
        import torch

        torch.manual_seed(seed)
        cls(config).save_pretrained(str(folder))
    else:
        config.save_pretrained(str(folder))
    return folder


def write_sst2(root: Path, n_train: int = 60, n_val: int = 20, n_test: int = 10, seed: int = 0,
               name: str = "sst2") -> Path:
    """`root/<name>` as `load_dataset("nyu-mll/glue", "sst2").save_to_disk` writes it: train,
    validation and test (labels -1) with columns sentence, label, idx."""
    from datasets import ClassLabel, Dataset, DatasetDict, Features, Value

    rng = np.random.default_rng(seed)
    features = Features({"sentence": Value("string"), "label": ClassLabel(names=["negative", "positive"]),
                         "idx": Value("int32")})

    def split(n, unlabelled=False):
        labels = [i % 2 for i in range(n)]
        return Dataset.from_dict({"sentence": [sentence(rng, y) for y in labels],
                                  "label": [-1] * n if unlabelled else labels, "idx": list(range(n))},
                                 features=features)

    DatasetDict({"train": split(n_train), "validation": split(n_val),
                 "test": split(n_test, unlabelled=True)}).save_to_disk(str(Path(root) / name))
    return Path(root)


def write_squad(root: Path, n_train: int = 30, n_val: int = 12, seed: int = 0) -> Path:
    """`root/squad` as `load_dataset("rajpurkar/squad").save_to_disk` writes it: train and
    validation with columns id, title, context, question, answers {text, answer_start}."""
    from datasets import Dataset, DatasetDict

    rng = np.random.default_rng(seed)

    def split(n, offset):
        rows = [qa_example(rng, offset + i) for i in range(n)]
        return Dataset.from_list(rows)

    DatasetDict({"train": split(n_train, 0), "validation": split(n_val, 1000)}).save_to_disk(str(Path(root) / "squad"))
    return Path(root)


def write_opt_and_sst2(root: Path) -> Path:
    """A tiny OPT (random weights) under root/opt and SST-2 under root: a causal LM on a prompted
    task, the smallest LLM setting."""
    write_tiny_causal_lm(root / "opt")
    write_sst2(root)
    return root


def tiny_opt_model(root: Path, dtype: str = "float32", device_map=None, lora=None):
    """`write_opt_and_sst2`'s OPT as a FunctionalModel on SST-2 (seeded: every call the same weights)."""
    import torch
    from conftest import typed_section

    from pazo.models.functional import FunctionalModel
    from pazo.models.hf_lm import HfCausalLmSchema, build_hf_lm_task

    cfg = typed_section(HfCausalLmSchema, {
        "path": str(root / "opt"), "download": False, "random_init": False, "dtype": dtype, "attention": "eager",
        "device_map": device_map, "dropout": None, **({"lora": lora} if lora is not None else {}), "task": "sst2",
        "label_words": None, "stop": "\n", "max_new_tokens": 4})
    torch.manual_seed(0)
    module = build_hf_lm_task(cfg, "causal")
    return FunctionalModel(module, loss_fn=module.loss_fn)
