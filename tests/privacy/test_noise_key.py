"""No two computations share noise: a seeded run's secret streams (Poisson batches, DP noise) are
keyed to everything that decides a released value (docs/design/noise-key.md): the settings (the
fingerprint), the private data, the public data and the initial parameters. Two runs with one
config and seed that differ in any one of these draw other noise and batches; the same
computation draws the same again (exact resume, golden runs)."""
from __future__ import annotations

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

import pazo.run.build as experiment
from pazo.run.build import build_run
from pazo.run.typed import run_config
from conftest import run_cache
from privacy.test_independent_noise import compose_cfg, secret_draws

#: the runs here read no PLD bound: their cross-check on the cheaper grid (conftest `cheap_pld`)
pytestmark = pytest.mark.usefixtures("cheap_pld")

#: what two computations may differ in (one at a time); None: nothing (the same computation)
PARTS = ("setting", "private data", "public data", "initial weights", None)


def changed_run(part: str | None, index: int, tmp_path):
    """A seeded digits run's assembly with `part` changed at `index` (a learning rate, one private
    label, one public pixel, one initial weight: as another checkpoint file's contents would)."""
    real_data, real_model = experiment.build_dataset, experiment.build_model

    def data(dataset_cfg, streams):
        bundle = real_data(dataset_cfg, streams)
        if part == "private data":
            split = bundle.private
            split.labels[index % len(split)] = (split.labels[index % len(split)] + 1) % bundle.num_classes
        elif part == "public data":
            bundle.public.inputs.view(-1)[index % bundle.public.inputs.numel()] += 1.0
        return bundle

    def model(*args, **kwargs):
        module = real_model(*args, **kwargs)
        if part == "initial weights":
            with torch.no_grad():
                weights = next(module.parameters()).view(-1)
                weights[index % len(weights)] += 0.5
        return module

    overrides = [f"method.lr={0.5 + (1 + index % 97) / 1000}"] if part == "setting" else []
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PAZO_CACHE_DIR", str(run_cache(tmp_path / "cache")))
        patch.setattr(experiment, "build_dataset", data)
        patch.setattr(experiment, "build_model", model)
        cfg = run_config(compose_cfg("method=pazo_m", "method.lr=0.5", *overrides))
        return build_run(cfg, sigma=1.0)  # (no calibration)


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    return secret_draws(changed_run(None, 0, tmp_path_factory.mktemp("baseline")))


@settings(max_examples=10, deadline=None, derandomize=True)   # one run assembled an example (under 1 s)
@given(part=st.sampled_from(PARTS), index=st.integers(0, 10**6))
@example(part="public data", index=3)        # the reported cases: other public data,
@example(part="initial weights", index=7)    # other initial weights (a checkpoint's other contents)
@example(part=None, index=0)
def test_computations_that_differ_in_one_part_draw_other_noise_and_batches(baseline, tmp_path_factory, part, index):
    batches, noise = secret_draws(changed_run(part, index, tmp_path_factory.mktemp("run")))
    if part is None:
        assert batches == baseline[0] and torch.equal(noise, baseline[1])
    else:
        assert batches != baseline[0] and not torch.equal(noise, baseline[1]), f"{part} shares the noise"


def test_the_key_digests_are_kept_private_and_recorded_for_a_resume(tmp_path):
    """The public data's and the initial parameters' digests are compared on a resume
    (`private_computation`, kept in the checkpoint) and never in the released facts."""
    run = changed_run(None, 0, tmp_path)
    private = run.private_computation
    assert {"private_data_sha256", "public_data_sha256", "initial_state_sha256"} <= set(private)
    described = str(run.describe())
    assert all(private[key] not in described for key in ("private_data_sha256", "initial_state_sha256"))
