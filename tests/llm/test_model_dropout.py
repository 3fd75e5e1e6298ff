"""`model.dropout` sets every dropout a pretrained model has: its dropout modules (RoBERTa, GPT-2)
and the rates its layers keep for `nn.functional.dropout` (OPT, Llama). Setting the modules alone
left OPT unchanged, silently: it has no dropout module. A model with nowhere to put a nonzero rate is
refused."""
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from torch import nn

from conftest import typed_section
from llm_fixtures import write_tiny_causal_lm
from pazo.errors import ConfigError
from pazo.models.dropout import is_dropout_rate, is_random_in_training
from pazo.models.hf_lm import HfCausalLmSchema, build_hf_lm_task, set_dropout

pytestmark = pytest.mark.llm

FAMILIES = ["opt", "llama", "roberta", "gpt2"]


def tiny(family: str) -> nn.Module:
    """A tiny model of `family` built from a config, its checkpoint's dropout 0.1 (0.0 for Llama)."""
    import transformers as tf

    torch.manual_seed(0)
    if family == "opt":
        return tf.OPTForCausalLM(tf.OPTConfig(vocab_size=40, hidden_size=16, num_hidden_layers=1, ffn_dim=32,
                                              num_attention_heads=2, word_embed_proj_dim=16, bos_token_id=1,
                                              eos_token_id=2, pad_token_id=0))
    if family == "llama":
        return tf.LlamaForCausalLM(tf.LlamaConfig(vocab_size=40, hidden_size=16, intermediate_size=32,
                                                  num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
                                                  bos_token_id=1, eos_token_id=2))
    if family == "roberta":
        return tf.RobertaForMaskedLM(tf.RobertaConfig(vocab_size=40, hidden_size=16, num_hidden_layers=1,
                                                      intermediate_size=32, num_attention_heads=2, pad_token_id=0,
                                                      bos_token_id=1, eos_token_id=2))
    return tf.GPT2LMHeadModel(tf.GPT2Config(vocab_size=40, n_embd=16, n_layer=1, n_head=2, bos_token_id=1,
                                            eos_token_id=2))


def dropout_places(model: nn.Module) -> list[tuple[str, float]]:
    places = [(f"{type(m).__name__}.p", m.p) for m in model.modules() if isinstance(m, nn.Dropout)]
    return places + [(f"{type(m).__name__}.{k}", v) for m in model.modules() for k, v in vars(m).items()
                     if isinstance(v, float) and is_dropout_rate(k)]


def two_train_forwards(model: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.tensor([[1, 5, 6, 7, 8, 9, 10, 11]])
    model.train()
    with torch.no_grad():
        return model(input_ids=ids).logits, model(input_ids=ids).logits


@settings(max_examples=12, deadline=None)
@given(family=st.sampled_from(FAMILIES), p=st.floats(0.2, 0.9))
@example(family="opt", p=0.5)     # the reported case: no dropout module, its rates on the layers
@example(family="llama", p=0.5)
def test_model_dropout_sets_every_dropout_the_model_has_and_its_forward_feels_it(family, p):
    model = tiny(family)
    layerdrop = getattr(model.config, "layerdrop", None)
    set_dropout(model, p, family)
    places = dropout_places(model)
    assert places and all(rate == p for _, rate in places), places
    if layerdrop is not None:   # (the chance of skipping a layer is not a dropout rate)
        assert all(m.layerdrop == layerdrop for m in model.modules() if hasattr(m, "layerdrop"))
    first, second = two_train_forwards(model)
    assert not torch.equal(first, second), f"{family}: model.dropout={p} left the train-mode forward unchanged"


@settings(max_examples=12, deadline=None)
@given(family=st.sampled_from(FAMILIES), p=st.sampled_from([0.0, 0.1, 0.5]), layerdrop=st.sampled_from([0.0, 0.3]))
@example(family="opt", p=0.1, layerdrop=0.0)    # an OPT checkpoint's own dropout: no module, rates on its layers
@example(family="opt", p=0.0, layerdrop=0.0)    # all off: deterministic, whatever OPT's forward draws unused
def test_a_forward_is_random_exactly_where_a_dropout_rate_or_layerdrop_is_above_zero(family, p, layerdrop):
    """What decides whether ranks may share out public gradients, and whether several processes refuse a
    first-order method (`is_random_in_training`): was blind to OPT's and Llama's float rates, so OPT with
    its checkpoint's dropout 0.1 had each rank draw masks for its own share."""
    model = tiny(family)
    set_dropout(model, p, family)
    for module in model.modules():
        if hasattr(module, "layerdrop"):
            module.layerdrop = layerdrop
    has_layerdrop = any(hasattr(m, "layerdrop") for m in model.modules())
    assert is_random_in_training(model) == (p > 0 or (has_layerdrop and layerdrop > 0))


@given(p=st.floats(0.01, 0.99))
@settings(max_examples=10, deadline=None)
def test_a_model_without_dropout_refuses_a_nonzero_rate_and_takes_zero(p):
    model = nn.Sequential(nn.Embedding(40, 8), nn.Linear(8, 40))
    with pytest.raises(ConfigError, match=rf"model.dropout={p} has nothing to set: the model at m "):
        set_dropout(model, p, "m")
    set_dropout(model, 0.0, "m")


def test_a_run_of_the_tiny_opt_with_model_dropout_has_dropout(tmp_path):
    """Through the model's builder, as `pazo-train model=hf_causal_lm model.dropout=0.5` builds it."""
    folder = write_tiny_causal_lm(tmp_path / "opt", weights=True)

    def built(dropout):
        cfg = {"path": str(folder), "download": False, "random_init": False, "dtype": "float32",
               "attention": "eager", "device_map": None, "dropout": dropout,
               "lora": {"enabled": False, "rank": 4, "alpha": 8, "dropout": 0.0, "target_modules": None},
               "task": "sst2", "label_words": None, "stop": "\n", "max_new_tokens": 8}
        return build_hf_lm_task(typed_section(HfCausalLmSchema, cfg), "causal").lm

    first, second = two_train_forwards(built(0.5))
    assert not torch.equal(first, second)
    first, second = two_train_forwards(built(None))   # the checkpoint's own (0.0)
    assert torch.equal(first, second)
