"""A sweep's bad inputs (`pazo-sweep`): a `--out` that cannot be written, a grid too large to run, a
spec whose YAML would expand without bound (aliases), a name that would leave `--out`. Each is one
`pazo: error:` line and exit 2 before any run starts (`launch` is never reached)."""
from __future__ import annotations

import errno
import math
import os
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import pazo.sweep.command as sweep
import pazo.sweep.spec as sweep_spec
from pazo.errors import ConfigError

#: a spec of one tiny run (`extra` adds its axes)
MINI = "name: mini\nsettings: [digits]\nmethods: [dpsgd]\nepsilons: [1]\ngrid: false\n"


@pytest.fixture
def no_launch(monkeypatch):
    """`launch` fails the test: every case here must end before a run starts."""
    def launch(*args, **kwargs):
        raise AssertionError("a run was launched")
    monkeypatch.setattr(sweep, "launch", launch)


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("pazo: error: "), err
    return err[0]


# --- a --out that cannot be written ----------------------------------------------------------------

#: capsys and no_launch hold across examples (each example reads its own lines)
ACROSS_EXAMPLES = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])


@settings(ACROSS_EXAMPLES, max_examples=5)
@given(code=st.sampled_from([errno.EACCES, errno.EPERM, errno.EROFS]), depth=st.integers(0, 2),
       exists=st.booleans(), selection=st.sampled_from(["grid", "private"]))
@example(code=errno.EACCES, depth=0, exists=False, selection="grid")   # the reported case: `chmod -w out`
@example(code=errno.EROFS, depth=1, exists=True, selection="private")
def test_an_out_folder_that_cannot_be_written_is_one_line_before_any_run(code, depth, exists, selection,
                                                                        tmp_path_factory, capsys, no_launch):
    """(root, who runs CI, writes into a chmod -w folder: the refusal is the file system's, played here
    by mkdir and open refusing every path below `--out`.)"""
    out = tmp_path_factory.mktemp("out").joinpath(*["sub"] * depth)
    spec = tmp_path_factory.mktemp("spec") / "mini.yaml"
    spec.write_text(MINI)
    if exists:
        (out / "mini").mkdir(parents=True)
    real_mkdir, real_open = Path.mkdir, os.open

    def below_out(path) -> bool:
        return Path(path).is_relative_to(out)

    def mkdir(self, *args, **kwargs):
        if below_out(self) and not self.exists():
            raise PermissionError(code, os.strerror(code), str(self))
        return real_mkdir(self, *args, **kwargs)

    def open_(path, flags, *args, **kwargs):
        if below_out(path) and flags & (os.O_WRONLY | os.O_RDWR):
            raise OSError(code, os.strerror(code), str(path))
        return real_open(path, flags, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Path, "mkdir", mkdir)
        patch.setattr(os, "open", open_)
        status = sweep.main([str(spec), "--out", str(out), "--selection", selection, "train.steps=2", "device=cpu",
                             "logger.mode=disabled"])
    assert status == 2
    line = one_error_line(capsys)
    assert str(out / "mini") in line and "you can write to" in line and "--out" in line


# --- a grid too large to run -----------------------------------------------------------------------

def axes_spec(lengths: list[int], seeds: int = 1) -> dict:
    extra = {f"x.k{i}": list(range(n)) for i, n in enumerate(lengths)}
    return {"name": "big", "settings": ["digits"], "methods": ["dpsgd"], "nonprivate": [], "epsilons": [1.0],
            "seeds": list(range(seeds)), "grid": False, "extra": extra}


@settings(max_examples=30)
@given(lengths=st.lists(st.integers(1, 40), min_size=1, max_size=4), seeds=st.integers(1, 3),
       limit=st.integers(1, 2000))
def test_a_grid_is_counted_before_it_is_made_and_refused_above_the_limit(lengths, seeds, limit):
    spec, total = axes_spec(lengths, seeds), seeds * math.prod(lengths)
    assert sweep_spec.count_runs(spec) == total
    if total > limit:
        with pytest.raises(ConfigError, match=f"its grid has {total:,} runs, more than the limit of {limit:,}"):
            sweep_spec.enumerate_runs(spec, max_runs=limit)
    else:
        assert len(sweep_spec.enumerate_runs(spec, max_runs=limit)) == total


def test_a_grid_of_27_million_runs_is_one_line_giving_its_count(tmp_path, capsys, no_launch):
    """The reported case: three axes of 300 values, counted, never enumerated (it would not end)."""
    spec = tmp_path / "big.yaml"
    spec.write_text(MINI.replace("name: mini", "name: big")
                    + "extra: {" + ", ".join(f"x.k{i}: {list(range(300))}" for i in range(3)) + "}\n")
    assert sweep.main([str(spec), "--out", str(tmp_path / "out"), "--dry-run"]) == 2
    line = one_error_line(capsys)
    assert "27,000,000 runs" in line and "100,000" in line and "--max-runs" in line
    assert not (tmp_path / "out").exists()


# --- a spec that YAML would expand without bound ---------------------------------------------------

def alias_bomb(depth: int, width: int) -> str:
    """A spec whose `extra` value nests `depth` levels, each a list of `width` aliases of the level
    below (its first the level itself, anchored): width**depth leaves once expanded."""
    level = "&a0 lol"
    for i in range(1, depth + 1):
        level = f"&a{i} [{level}, {', '.join([f'*a{i - 1}'] * (width - 1))}]"
    return MINI.replace("name: mini", "name: bomb") + f"extra: {{x.y: [{level}]}}\n"


def copied_out_nodes(value) -> int:
    """The nodes of a loaded YAML value, every alias copied out (a mapping: itself, its keys and values)."""
    if isinstance(value, dict):
        return 1 + sum(copied_out_nodes(k) + copied_out_nodes(v) for k, v in value.items())
    if isinstance(value, list):
        return 1 + sum(map(copied_out_nodes, value))
    return 1


@settings(max_examples=12)
@given(depth=st.integers(2, 12), width=st.integers(2, 10))
@example(depth=9, width=10)     # the reported case: a billion laughs
@example(depth=4, width=10)     # 10,000 leaves, more nodes: the bound counts every node, not the leaves
def test_a_spec_that_expands_past_the_bound_is_refused_before_it_is_expanded(depth, width, tmp_path_factory):
    spec = tmp_path_factory.mktemp("bomb") / "bomb.yaml"
    spec.write_text(alias_bomb(depth, width))
    # at least its leaves; where they are few enough to copy out, counted whole from the loaded file
    too_big = width ** depth > sweep_spec.MAX_SPEC_NODES or \
        copied_out_nodes(yaml.safe_load(spec.read_text())) > sweep_spec.MAX_SPEC_NODES
    with pytest.MonkeyPatch.context() as patch:
        if too_big:     # not expanded at all: OmegaConf never sees the file
            patch.setattr(sweep_spec.OmegaConf, "load", lambda *a: pytest.fail("the bomb was expanded"))
        with pytest.raises(ConfigError) as refused:
            sweep_spec.load_spec(str(spec))
    said = str(refused.value)
    if too_big:
        assert f"expands to more than {sweep_spec.MAX_SPEC_NODES:,} YAML nodes" in said and "not valid YAML" not in said
    else:                                     # a small one is nested lists: not an axis's plain values
        assert "x.y must list plain values" in said


@settings(max_examples=30)
@given(value=st.recursive(st.integers() | st.text("abc xyz01", max_size=3),
                          lambda inner: st.lists(inner, min_size=1, max_size=3)
                          | st.dictionaries(st.text("abc", min_size=1, max_size=2), inner, min_size=1, max_size=2),
                          max_leaves=6).filter(lambda v: isinstance(v, (list, dict))))
def test_an_axis_value_that_is_not_a_plain_value_is_refused(value, tmp_path_factory):
    spec = tmp_path_factory.mktemp("nested") / "nested.yaml"
    spec.write_text(MINI + yaml.safe_dump({"extra": {"x.y": [1, value]}}))
    with pytest.raises(ConfigError, match="x.y must list plain values"):
        sweep_spec.load_spec(str(spec))


def test_the_billion_laughs_is_one_line_before_any_run(tmp_path, capsys, no_launch):
    spec = tmp_path / "bomb.yaml"
    spec.write_text(alias_bomb(9, 10))
    assert sweep.main([str(spec), "--out", str(tmp_path / "out")]) == 2
    assert f"expands to more than {sweep_spec.MAX_SPEC_NODES:,} YAML nodes" in one_error_line(capsys)


# --- a name that would leave --out ------------------------------------------------------------------

PLAIN = st.text(st.characters(codec="utf-8", exclude_characters="/\\\0\n\r:#{}[],&*!|>'\"%@`"),
                min_size=1, max_size=12).filter(lambda t: t.strip() not in ("", ".", "..") and t == t.strip())


@settings(max_examples=40)
@given(key=st.sampled_from(["name", "settings", "methods"]),
       bad=st.one_of(st.sampled_from(["..", ".", "/tmp/x", "../../x", "a/b", "a\\b"]),
                     st.tuples(PLAIN, PLAIN).map("/".join), PLAIN.map(lambda t: "/" + t)))
@example(key="name", bad="../../x")    # the reported case
def test_a_spec_field_that_names_a_folder_must_be_a_plain_name(key, bad, tmp_path_factory):
    spec = tmp_path_factory.mktemp("names") / "named.yaml"
    fields = {"name": "mini", "settings": ["digits"], "methods": ["dpsgd"], "epsilons": [1]}
    fields[key] = bad if key == "name" else [bad]
    spec.write_text(yaml.safe_dump(fields))
    with pytest.raises(ConfigError, match="names a folder below --out: give a plain name"):
        sweep_spec.load_spec(str(spec))


@settings(max_examples=40)
@given(name=PLAIN)
def test_a_plain_name_is_accepted(name, tmp_path_factory):
    spec = tmp_path_factory.mktemp("names") / "named.yaml"
    spec.write_text(yaml.safe_dump({"name": name, "settings": ["digits"], "methods": ["dpsgd"], "epsilons": [1]}))
    assert sweep_spec.load_spec(str(spec))["name"] == name


@settings(max_examples=30)
@given(value=st.tuples(PLAIN, PLAIN).map("/".join) | st.sampled_from(["../../x", "/etc", "a\\b"]))
def test_an_axis_value_that_would_name_a_folder_is_refused(value, tmp_path_factory):
    spec = tmp_path_factory.mktemp("values") / "values.yaml"
    spec.write_text(MINI + yaml.safe_dump({"extra": {"x.y": [value]}}))
    with pytest.raises(ConfigError, match="would name a folder below --out"):
        sweep_spec.load_spec(str(spec))


def test_a_name_outside_out_is_one_line_before_any_run(tmp_path, capsys, no_launch):
    spec = tmp_path / "escape.yaml"
    spec.write_text(MINI.replace("name: mini", "name: ../../x"))
    assert sweep.main([str(spec), "--out", str(tmp_path / "a" / "b" / "out")]) == 2
    assert "name '../../x' names a folder below --out" in one_error_line(capsys)
    assert not (tmp_path / "a").exists() and not (tmp_path / "x").exists()
