"""`pazo.load_run` and `pazo-eval`: a finished run loads back with the model it trained (its test
accuracy is the summary's final one, through the library and the command), its typed config and its
privacy facts; weights round-trip through safetensors (tied names included), older runs' model.pt
still load; a folder that is no finished run, a data set of another label space and an evaluation
split holding the run's private examples are refused in one line. Runs are tiny digits runs,
trained once per module."""
from __future__ import annotations

import json
import shutil
import sys

import pytest
import torch
from hydra import compose, initialize_config_dir
from hypothesis import example, given, settings
from hypothesis import strategies as st

import pazo
import pazo.eval
from conftest import ROOT, run_cache
from pazo.config_schema import PrivacySchema, TrainSchema
from pazo.errors import ConfigError
from pazo.methods import MethodConfig
from pazo.train import run
from pazo.run.weights import read_weights, state_bytes

#: tiny runs of several methods, models and privacy settings (method, extra overrides)
RUNS = {
    "pazo_m": ["method=pazo_m"],
    "dpsgd": ["method=dpsgd", "model.width=4"],
    "dpzero_lr": ["method=dpzero", "method.lr=0.01", "train.batch_size=32"],
    "mezo_nonprivate": ["method=mezo", "privacy=none"],
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Each of RUNS trained once (3 steps, CPU, W&B off) into its own directory."""
    root = tmp_path_factory.mktemp("runs")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PAZO_CACHE_DIR", str(run_cache(root / "cache")))
        done = {}
        for name, overrides in RUNS.items():
            with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
                cfg = compose(config_name="config", overrides=["logger.mode=disabled", "train.steps=3", "device=cpu",
                                                               *overrides])
            summary = run(cfg, root / name)
            assert summary["status"] == "finished"
            done[name] = root / name
    return done


@settings(max_examples=8)
@given(name=st.sampled_from(sorted(RUNS)), batch_size=st.integers(1, 400))
@example(name="pazo_m", batch_size=1024)
def test_a_loaded_run_scores_its_final_test_accuracy(runs, name, batch_size):
    """The rule: load_run's model, evaluated on the run's test split (any batch size), has the
    accuracy the run's summary reports, and its config and privacy facts are the summary's."""
    loaded = pazo.load_run(runs[name])
    summary = json.loads((runs[name] / "summary.json").read_text())
    evaluation = loaded.evaluate(batch_size=batch_size)
    assert evaluation.metrics["accuracy"] == summary["final_test_accuracy"]
    assert evaluation.metrics["loss"] == pytest.approx(summary["final_test_loss"], rel=1e-5)
    assert not loaded.model.training and isinstance(loaded.config.method, MethodConfig)
    assert isinstance(loaded.config.train, TrainSchema) and isinstance(loaded.config.privacy, PrivacySchema)
    assert loaded.config.method.name == summary["method"] and loaded.config.train.steps == 3
    privacy = summary["privacy"]
    assert loaded.privacy.private == privacy["private"] and loaded.privacy.steps == 3
    assert loaded.privacy.epsilon_spent == privacy.get("epsilon_spent") and loaded.privacy.sigma == privacy["sigma"]
    assert loaded.privacy.outside_guarantee == summary["outside_guarantee"] and loaded.privacy.status == "finished"


def test_load_run_leaves_the_global_random_state_as_it_was(runs):
    before = torch.random.get_rng_state()
    pazo.load_run(runs["pazo_m"])
    assert torch.equal(torch.random.get_rng_state(), before)


@pytest.mark.parametrize("name", sorted(RUNS))
def test_pazo_eval_prints_the_final_test_accuracy(runs, name, capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["pazo-eval", str(runs[name]), "--device", "cpu"])
    before = {p.name: p.stat().st_mtime_ns for p in runs[name].iterdir()}
    pazo.eval.cli()
    out = capsys.readouterr().out.splitlines()
    summary = json.loads((runs[name] / "summary.json").read_text())
    assert out[0] == f"pazo: {runs[name]}: test split of dataset=digits, the run's own, 359 examples"
    assert out[1].startswith(f"  accuracy {summary['final_test_accuracy']:.4f}, loss ")
    assert "post-processing of the released model" in out[2] and "costs no privacy" in out[2]
    assert {p.name: p.stat().st_mtime_ns for p in runs[name].iterdir()} == before   # nothing written


def test_an_older_run_with_model_pt_still_loads(runs, tmp_path):
    old = tmp_path / "old"
    shutil.copytree(runs["dpsgd"], old)
    torch.save(read_weights(old / "model.safetensors"), old / "model.pt")
    (old / "model.safetensors").unlink()
    summary = json.loads((old / "summary.json").read_text())
    for key in ("input_shape", "num_classes"):   # (written before the summary recorded the shape facts)
        del summary["data"][key]
    (old / "summary.json").write_text(json.dumps(summary))
    assert pazo.load_run(old).evaluate().metrics["accuracy"] == summary["final_test_accuracy"]


tensors = st.builds(lambda shape, dtype, seed: torch.randn(shape, generator=torch.Generator().manual_seed(seed))
                    .to(dtype),
                    st.lists(st.integers(1, 4), min_size=0, max_size=3).map(tuple),
                    st.sampled_from([torch.float32, torch.float16, torch.bfloat16, torch.float64]),
                    st.integers(0, 2**31))


@settings(max_examples=40)
@given(values=st.lists(tensors, min_size=1, max_size=5), ties=st.lists(st.integers(0, 4), max_size=3),
       transpose=st.booleans())
def test_weights_round_trip_through_safetensors_with_tied_names(values, ties, transpose):
    """The rule: every name of a state dict reads back equal, in its dtype and shape, whether it is
    a tensor of its own, a second name of one (tied weights) or a view into another's storage."""
    state = {f"w{i}": v for i, v in enumerate(values)}
    for j, i in enumerate(ties):
        state[f"tied{j}"] = values[i % len(values)]
    big = torch.arange(12.0).reshape(3, 4)
    state["base"], state["view"] = big, (big.t() if transpose else big[1:])
    path = _write(state)
    back = read_weights(path)
    assert set(back) == set(state)
    for name, tensor in state.items():
        assert back[name].dtype == tensor.dtype and torch.equal(back[name], tensor), name


def _write(state):
    import tempfile
    from pathlib import Path

    path = Path(tempfile.mkdtemp()) / "model.safetensors"
    path.write_bytes(state_bytes(state))
    return path


@pytest.mark.parametrize("status", ["running", "failed", "interrupted", "preempted", "fault"])
def test_a_run_that_did_not_finish_is_one_line_naming_it(runs, tmp_path, status):
    partial = tmp_path / "partial"
    shutil.copytree(runs["pazo_m"], partial)
    summary = json.loads((partial / "summary.json").read_text())
    (partial / "summary.json").write_text(json.dumps({**summary, "status": status}))
    with pytest.raises(ConfigError, match=rf"^{partial} holds a run that did not finish \(status {status}"):
        pazo.load_run(partial)


@pytest.mark.parametrize("remove,message", [
    ("summary.json", "is not a pazo run: its summary.json is missing"),
    ("config.yaml", "is not a whole pazo run: its config.yaml is missing"),
    ("model.safetensors", "is not a whole pazo run: its model.safetensors is missing"),
])
def test_a_folder_that_is_no_whole_run_is_one_line_naming_what_is_missing(runs, tmp_path, remove, message):
    copy = tmp_path / "copy"
    shutil.copytree(runs["pazo_m"], copy)
    (copy / remove).unlink()
    with pytest.raises(ConfigError, match=f"^{copy} {message}"):
        pazo.load_run(copy)
    with pytest.raises(ConfigError, match="no such folder"):
        pazo.load_run(tmp_path / "nowhere")


@pytest.mark.parametrize("entry", ["library", "command"])
def test_an_empty_path_is_refused_as_empty_even_inside_a_run(runs, entry, capsys, monkeypatch):
    """`pazo-eval ''` said `. is not a pazo run`; inside a run directory it evaluated that run."""
    monkeypatch.chdir(runs["pazo_m"])
    empty = "the run directory's path is empty: give a finished run's directory (pazo-train's hydra.run.dir)"
    if entry == "library":
        with pytest.raises(ConfigError) as refused:
            pazo.load_run("")
        assert str(refused.value) == empty
        return
    monkeypatch.setattr(sys, "argv", ["pazo-eval", "", "--device", "cpu"])
    with pytest.raises(SystemExit) as stop:
        pazo.eval.cli()
    assert stop.value.code == 2 and capsys.readouterr().err == f"pazo: error: {empty}\n"


@pytest.mark.parametrize("overrides,message", [
    (["dataset.test_fraction=0.3"], "are the run's private training examples"),
    (["dataset.test_fraction=0.5"], "are the run's private training examples"),
    (["dataset=cifar10"], "has 10 classes of 3x32x32 inputs; the run's model was trained on 10 classes of 1x8x8"),
    (["method=dpsgd"], "takes data set overrides only"),
    (["dataset.nope=1"], "unknown key dataset.nope"),
])
def test_pazo_eval_refuses_bad_or_private_evaluation_data_in_one_line(runs, overrides, message, capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["pazo-eval", str(runs["pazo_m"]), "--device", "cpu", *overrides])
    with pytest.raises(SystemExit) as stop:
        pazo.eval.cli()
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.startswith("pazo: error: ") and len(err.splitlines()) == 1
    assert message in err


@pytest.mark.parametrize("argv", [[], ["--device", "cpu"]])
def test_pazo_eval_without_a_run_names_only_the_run_directory_as_missing(argv, capsys, monkeypatch):
    """The overrides are optional: a command without a run names the one argument it needs."""
    monkeypatch.setattr(sys, "argv", ["pazo-eval", *argv])
    with pytest.raises(SystemExit) as stop:
        pazo.eval.cli()
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.strip().endswith("the following arguments are required: run_dir"), err


@pytest.mark.parametrize("override", ["dataset.val_fraction=0.2", "dataset.public_fraction=0.3"])
def test_overrides_that_keep_the_test_split_evaluate_the_same_examples(runs, override):
    """A re-split that moves no private example into the test split (the validation and public
    shares re-carve the rest) is allowed, and scores the run's accuracy again."""
    loaded = pazo.load_run(runs["pazo_m"])
    again = loaded.evaluate([override])
    assert again.metrics["accuracy"] == loaded.summary["final_test_accuracy"]


def test_the_loaded_config_has_every_section_a_run_config_has():
    """A section added to the run's config (`config_schema.SECTIONS`) is a field of `RunConfig` too,
    so loading a run that has it does not fail (was: schedule and optimizer, added later)."""
    from dataclasses import fields

    from pazo.config_schema import SECTIONS
    from pazo.run.loaded import RunConfig

    assert set(SECTIONS) <= {f.name for f in fields(RunConfig)}
