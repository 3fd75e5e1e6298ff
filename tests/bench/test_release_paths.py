"""`pazo-bench release` (pazo.bench.release_paths): the host and device arithmetics of a zeroth-order
step's release timed in one process on CPU. What is checked is that each copy runs the path it is
named for, and that the command writes its rows with their provenance; the timings themselves are
measured, not judged (a shared machine)."""
import json
import math
import sys

import pytest
import torch

from pazo.bench import release_paths
from pazo.errors import unknown_choice
from pazo.privacy.mechanisms import ScalarPrivatizer

QUARTILES = {"median", "p25", "p75"}


@pytest.mark.parametrize("name", ["dpzero", "pazo_s"])
def test_each_copy_releases_by_the_arithmetic_it_is_named_for(name, monkeypatch):
    """On CPU `releases_on_device` says host; the device copy still goes through the tensor release
    (device_sum), the host copy through the Python floats' (PAZO-S: twice a step, with its noisy
    candidate)."""
    called = []
    for way in ("release", "release_tensor"):
        original = getattr(ScalarPrivatizer, way)
        monkeypatch.setattr(ScalarPrivatizer, way,
                            lambda self, values, way=way, original=original: (called.append(way),
                                                                              original(self, values))[1])
    steps = release_paths.path_steps(name, "digits")
    for path, way in (("host", "release"), ("device", "release_tensor")):
        called.clear()
        steps[path](1)
        assert called and set(called) == {way}, path


def test_the_command_writes_both_paths_timed_with_their_spread(tmp_path, monkeypatch, capsys):
    out = tmp_path / "release.json"
    monkeypatch.setattr(sys, "argv", ["pazo-bench release", "--rounds", "2", "--warmup", "0", "--out", str(out)])
    threads = torch.get_num_threads()
    try:
        with pytest.raises(SystemExit) as stop:
            release_paths.cli()
    finally:
        torch.set_num_threads(threads)
    assert stop.value.code == 0, capsys.readouterr().err
    result = json.loads(out.read_text())
    assert list(result)[:4] == ["command", "commit", "date", "machine"] and result["machine"]["threads"] == 1
    (row,) = result["results"]
    assert (row["setting"], row["method"], row["rounds"], row["clock"]) == ("digits", "dpzero", 2, "cpu")
    for key in ("host_step_ms", "device_step_ms", "paired_device_over_host", "paired_device_minus_host_us"):
        assert set(row[key]) == QUARTILES and all(math.isfinite(v) for v in row[key].values()), key
        assert row[key]["p25"] <= row[key]["median"] <= row[key]["p75"], key
    assert row["host_step_ms"]["p25"] > 0 and row["paired_device_over_host"]["p25"] > 0


def test_an_unknown_method_is_one_line_before_any_step(tmp_path, monkeypatch, capsys):
    out = tmp_path / "release.json"
    monkeypatch.setattr(sys, "argv", ["pazo-bench release", "--methods", "dpzero,sgd", "--out", str(out)])
    with pytest.raises(SystemExit) as stop:
        release_paths.cli()
    assert stop.value.code == 2 and capsys.readouterr().err.splitlines()[-1].endswith(
        "error: " + unknown_choice("method", "sgd", release_paths.method_names("zeroth_order")))
    assert not out.exists()
