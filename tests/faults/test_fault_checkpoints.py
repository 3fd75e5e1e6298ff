"""Resume from a bad checkpoint (issue family 6): a garbage checkpoint, one truncated by a kill
during its write, one of another shape or missing parts, and an unreadable summary beside a good
checkpoint are refused in one line naming the file, before any compute where the file itself
shows it, and nothing in the run directory is moved, changed or deleted. A write a kill broke off
leaves the previous checkpoint, from which the run resumes."""
import io
import json
import os
import shutil
import signal
import subprocess
import sys

import pytest
import torch

import pazo.run.launch
import pazo.train
from fault_runtime_helpers import TINY, leftovers, one_error_line, snapshot
from pazo.run.checkpoint import CHECKPOINT, checkpoint_path, read_checkpoint, save_checkpoint
from pazo.errors import ConfigError
from pazo.run.gate import LEDGER
from pazo.methods.two_point import TwoPointMethod
from pazo.train import run

CFG = [*TINY, "train.steps=6", "train.checkpoint_every=2"]


@pytest.fixture(scope="module")
def preempted(tmp_path_factory):
    """A run directory of a run preempted (SIGTERM) after step 3, with its checkpoint at step 3."""
    from hydra import compose, initialize_config_dir

    from conftest import CONFIG_DIR

    folder = tmp_path_factory.mktemp("preempted")
    saved_cache = os.environ.get("PAZO_CACHE_DIR")
    os.environ["PAZO_CACHE_DIR"] = str(folder / "cache")
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose(config_name="config", overrides=CFG)
    original = TwoPointMethod.step

    def step(self, x, y, t):
        if t == 3:
            os.kill(os.getpid(), signal.SIGTERM)
        return original(self, x, y, t)

    TwoPointMethod.step = step
    try:
        summary = run(cfg, folder / "run")
    finally:
        TwoPointMethod.step = original
        if saved_cache is None:
            os.environ.pop("PAZO_CACHE_DIR", None)
        else:
            os.environ["PAZO_CACHE_DIR"] = saved_cache
    assert summary["status"] == "preempted" and checkpoint_path(folder / "run").exists()
    return folder / "run"


@pytest.fixture
def run_dir(preempted, tmp_path):
    target = tmp_path / "run"
    shutil.copytree(preempted, target)
    return target


def _saved(obj) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def _good(run_dir) -> dict:
    return torch.load(checkpoint_path(run_dir), weights_only=True)


DAMAGE = {
    "truncated_to_half": lambda d, data: data[:len(data) // 2],
    "truncated_to_100_bytes": lambda d, data: data[:100],
    "empty": lambda d, data: b"",
    "garbage": lambda d, data: os.urandom(4096),
    "text": lambda d, data: b"this is not a checkpoint\n" * 10,
    "a_list": lambda d, data: _saved([1, 2, 3]),
    "a_tensor": lambda d, data: _saved(torch.zeros(3)),
    "no_fingerprint": lambda d, data: _saved({k: v for k, v in _good(d).items() if k != "fingerprint"}),
    "no_model": lambda d, data: _saved({k: v for k, v in _good(d).items() if k != "model"}),
    "loop_of_another_version": lambda d, data: _saved({**_good(d), "loop": {"step": 3}}),
    "rng_not_a_tensor": lambda d, data: _saved({**_good(d), "torch_rng": [1, 2]}),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_checkpoint_is_refused_before_compute_and_nothing_is_lost(damage, run_dir, hydra_cfg, monkeypatch):
    path = checkpoint_path(run_dir)
    path.write_bytes(DAMAGE[damage](run_dir, path.read_bytes()))
    before = snapshot(run_dir)
    monkeypatch.setattr(pazo.run.launch, "build_run", lambda *a, **k: pytest.fail("compute started"))
    with pytest.raises(ConfigError) as caught:
        run(hydra_cfg(*CFG), run_dir)
    message = str(caught.value)
    assert str(path) in message and "cannot resume" in message and "\n" not in message
    assert snapshot(run_dir) == before   # the checkpoint and every other file as they were


@pytest.mark.parametrize("damage", ["weights_of_another_shape", "missing_weight", "streams_of_another_run"])
def test_a_checkpoint_that_does_not_fit_the_run_is_refused_naming_it(damage, run_dir, hydra_cfg):
    state = _good(run_dir)
    if damage == "weights_of_another_shape":
        name = next(iter(state["model"]))
        state["model"][name] = torch.zeros(3, 3, 3)
    elif damage == "missing_weight":
        state["model"].pop(next(iter(state["model"])))
    else:
        state["streams"]["torch"] = state["streams"]["torch"] + state["streams"]["torch"]
    checkpoint_path(run_dir).write_bytes(_saved(state))
    before = snapshot(run_dir)
    with pytest.raises(ConfigError, match="does not fit this run") as caught:
        run(hydra_cfg(*CFG), run_dir)
    assert str(checkpoint_path(run_dir)) in str(caught.value)
    assert snapshot(run_dir) == before


@pytest.mark.parametrize("content", [b"{\"status\": \"preem", b"", b"[1, 2]", b"\x00\x01garbage"])
def test_an_unreadable_summary_beside_a_checkpoint_is_refused(content, run_dir, hydra_cfg, monkeypatch):
    (run_dir / "summary.json").write_bytes(content)
    before = snapshot(run_dir)
    monkeypatch.setattr(pazo.run.launch, "build_run", lambda *a, **k: pytest.fail("compute started"))
    with pytest.raises(ConfigError, match="summary.json cannot be read") as caught:
        run(hydra_cfg(*CFG), run_dir)
    assert str(checkpoint_path(run_dir)) in str(caught.value)
    assert snapshot(run_dir) == before


def test_an_unreadable_summary_after_released_rows_is_refused_and_kept(run_dir, hydra_cfg, monkeypatch):
    """(Was: started over, the earlier attempt archived.) Its rows were released, and without its
    summary whether this launch replays its computation cannot be told: one line, nothing moved."""
    checkpoint_path(run_dir).unlink()
    (run_dir / "summary.json").write_text('{"status": "pre')
    before = snapshot(run_dir)
    monkeypatch.setattr(pazo.run.launch, "build_run", lambda *a, **k: pytest.fail("compute started"))
    with pytest.raises(ConfigError, match="summary.json cannot be read"):
        run(hydra_cfg(*CFG), run_dir)
    assert snapshot(run_dir) == before


def test_an_unreadable_summary_without_releases_starts_over_and_keeps_it(run_dir, hydra_cfg):
    checkpoint_path(run_dir).unlink()
    (run_dir / "summary.json").write_text('{"status": "pre')
    (run_dir / "metrics.jsonl").write_text("")
    (run_dir / LEDGER).unlink()   # (an attempt that released no row has no ledger)
    summary = run(hydra_cfg(*CFG), run_dir)
    assert summary["status"] == "finished" and summary["earlier_attempt_moved_to"].endswith("attempts/1")
    assert (run_dir / "attempts" / "1" / "summary.json").read_text() == '{"status": "pre'


def test_a_kill_during_a_checkpoint_write_leaves_the_previous_one_and_the_run_resumes(run_dir, hydra_cfg,
                                                                                      monkeypatch):
    good = checkpoint_path(run_dir).read_bytes()
    # a kill during the next write left its half-written temporary file (the process could not remove it)
    (checkpoint_path(run_dir).with_name(CHECKPOINT + ".tmp")).write_bytes(good[:len(good) // 3])
    (run_dir / "summary.json.tmp").write_text('{"status": "fin')   # and one of a summary
    summary = run(hydra_cfg(*CFG), run_dir)
    assert summary["status"] == "finished" and summary["resumed_from_step"] == 3
    assert not leftovers(run_dir) and not checkpoint_path(run_dir).exists()


def test_a_write_broken_off_by_an_interrupt_keeps_the_previous_checkpoint(run_dir, monkeypatch):
    good = checkpoint_path(run_dir).read_bytes()
    real_save = torch.save

    def interrupted_save(obj, f, *a, **k):
        f.write(b"PK\x03\x04 half a zip")
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", interrupted_save)
    model = torch.nn.Linear(2, 2)

    class Nothing:
        def state(self):
            return {}

    from pazo.run.checkpoint import LoopState
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(run_dir, fingerprint="f", module=model, streams=Nothing(), sampler=Nothing(),
                        loop=LoopState(), extra={})
    monkeypatch.setattr(torch, "save", real_save)
    assert checkpoint_path(run_dir).read_bytes() == good and not leftovers(run_dir)
    read_checkpoint(checkpoint_path(run_dir))


def test_a_good_checkpoint_reads_back_and_is_private(run_dir):
    checkpoint = read_checkpoint(checkpoint_path(run_dir))
    assert checkpoint["loop"]["step"] == 3
    assert checkpoint_path(run_dir).stat().st_mode & 0o777 == 0o600


def test_cli_garbage_checkpoint_is_one_line_and_exit_2(run_dir):
    """As a user meets it: a real `python -m pazo.train` process relaunched into the directory."""
    checkpoint_path(run_dir).write_bytes(b"garbage" * 100)
    hydra_before = snapshot(run_dir / ".hydra") if (run_dir / ".hydra").exists() else {}
    done = subprocess.run([sys.executable, "-m", "pazo.train", *CFG, f"hydra.run.dir={run_dir}"],
                          capture_output=True, text=True, timeout=600)
    code, err = done.returncode, done.stderr
    line = one_error_line(err)
    assert code == 2 and f"checkpoint {checkpoint_path(run_dir)} cannot be read" in line
    assert checkpoint_path(run_dir).read_bytes() == b"garbage" * 100
    after = snapshot(run_dir / ".hydra") if (run_dir / ".hydra").exists() else {}
    assert after == hydra_before   # the refused launch's record was dropped
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "preempted"
