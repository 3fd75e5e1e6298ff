"""A language-model run exported in the Hugging Face format (`pazo.load_run(...).export_hf`, `pazo-eval
--export-hf`) loads with `transformers` / `peft` as it is and gives the loaded run's logits: full
fine-tuning as `save_pretrained` output, LoRA as a peft adapter over the base its config names
(model.path where it holds weights; the run's own random base written beside it otherwise). Every
file of an export is released as the run's model is (through the gate: 0644), the weights too."""
import stat

import pytest
import torch

import pazo
from llm_fixtures import write_sst2, write_tiny_causal_lm
from pazo.errors import ConfigError
from pazo.train import run

pytestmark = pytest.mark.llm


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf_export")
    write_tiny_causal_lm(root / "opt")                      # a config only: random weights
    write_tiny_causal_lm(root / "opt_weights", weights=True)  # a downloaded model's folder
    write_sst2(root)
    return root


def _trained(hydra_cfg, root, tmp_path, model, *extra):
    cfg = hydra_cfg("model=hf_causal_lm", f"model.path={root / model}", f"dataset.root={root}", "dataset=sst2",
                    "model.attention=eager", "dataset.n_train=24", "dataset.n_val=6", "train.batch_size=8",
                    "method=dpzero", "privacy.sigma=5.0", "engine.name=inplace", *extra)
    assert run(cfg, tmp_path / "run")["status"] == "finished"
    return pazo.load_run(tmp_path / "run")


def _released_as_the_model_is(folder):
    """Every file of the export has a released file's mode (safetensors writes its own 0600)."""
    from pazo.run.gate import MODES, RELEASED

    files = [path for path in folder.rglob("*") if path.is_file()]
    assert files and not [path for path in folder.rglob("*") if path.name.startswith(".staging-")]
    assert {str(p.relative_to(folder)): oct(stat.S_IMODE(p.stat().st_mode)) for p in files} == \
        {str(p.relative_to(folder)): oct(MODES[RELEASED]) for p in files}


def _ids(loaded):
    return torch.tensor([loaded.model.tokenizer.encode("a great movie, so. It was")])


@pytest.mark.parametrize("model", ["opt", "opt_weights"])
def test_a_full_fine_tuning_run_loads_with_transformers_as_it_is(root, hydra_cfg, tmp_path, model):
    from transformers import AutoModelForCausalLM

    loaded = _trained(hydra_cfg, root, tmp_path, model)
    folder = loaded.export_hf(tmp_path / "hf")
    _released_as_the_model_is(folder)
    again = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
    with torch.no_grad():
        assert torch.equal(again(_ids(loaded)).logits, loaded.model.lm(_ids(loaded)).logits)
    with pytest.raises(ConfigError, match="exists and is not an empty folder"):
        loaded.export_hf(folder)


@pytest.mark.parametrize("model", ["opt", "opt_weights"])
def test_a_lora_run_loads_as_a_peft_adapter_over_its_base(root, hydra_cfg, tmp_path, model):
    import json

    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    loaded = _trained(hydra_cfg, root, tmp_path, model, "model.lora.enabled=true")
    folder = loaded.export_hf(tmp_path / "adapter")
    _released_as_the_model_is(folder)   # (issue #60: adapter_model.safetensors, base/model.safetensors were 0600)
    base_path = json.loads((folder / "adapter_config.json").read_text())["base_model_name_or_path"]
    assert base_path == str((root / "opt_weights").resolve() if model == "opt_weights" else (folder / "base").resolve())
    base = AutoModelForCausalLM.from_pretrained(base_path, attn_implementation="eager")
    adapted = PeftModel.from_pretrained(base, folder).eval()
    with torch.no_grad():
        assert torch.equal(adapted(input_ids=_ids(loaded)).logits, loaded.model.lm(input_ids=_ids(loaded)).logits)


@pytest.fixture(scope="module")
def masked_root(root):
    from fixtures import write_tiny_roberta

    write_tiny_roberta(root / "roberta")
    return root


def _trained_masked(hydra_cfg, root, tmp_path, *extra):
    cfg = hydra_cfg("model=hf_masked_lm", f"model.path={root / 'roberta'}", f"dataset.root={root}", "dataset=sst2",
                    "dataset.label_words=[' No',' Yes']", "dataset.n_train=24", "dataset.n_val=6",
                    "train.batch_size=8", "train.steps=2", "method=dpzero", "privacy.sigma=5.0",
                    "engine.name=inplace", *extra)
    assert run(cfg, tmp_path / "run")["status"] == "finished"
    return pazo.load_run(tmp_path / "run")


@pytest.mark.parametrize("model", ["opt", "opt_weights", "roberta"])
def test_a_lora_adapter_loads_with_peft_auto_class_from_its_folder_alone(masked_root, hydra_cfg, tmp_path, model):
    """peft's own one-line loader (`AutoPeftModelForCausalLM`, `AutoPeftModel` for a masked LM, which
    has no peft task type) builds the base from the adapter's config and gives the run's logits."""
    from peft import AutoPeftModel, AutoPeftModelForCausalLM

    if model == "roberta":
        loaded = _trained_masked(hydra_cfg, masked_root, tmp_path, "model.lora.enabled=true")
        auto, run_lm = AutoPeftModel, loaded.model.mlm
    else:
        loaded = _trained(hydra_cfg, masked_root, tmp_path, model, "model.lora.enabled=true")
        auto, run_lm = AutoPeftModelForCausalLM, loaded.model.lm
    adapted = auto.from_pretrained(loaded.export_hf(tmp_path / "adapter"), attn_implementation="eager").eval()
    with torch.no_grad():
        assert torch.equal(adapted(input_ids=_ids(loaded)).logits, run_lm(input_ids=_ids(loaded)).logits)
