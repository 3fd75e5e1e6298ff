"""`pazo-train ... --plan`: the run's privacy plan printed without training, exit 0, and nothing
written under the output root; a bad override is the same one line as a run's."""
from __future__ import annotations

import pytest
from conftest import run_cache
from hypothesis import example, given, settings, strategies as st

from pazo.errors import ConfigError
from pazo.train import plan_only


@pytest.fixture
def elsewhere(tmp_path, monkeypatch):
    """A working directory outside the checkout (the output root, outputs/, is relative to it)."""
    monkeypatch.setenv("PAZO_CACHE_DIR", str(run_cache(tmp_path / "cache")))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return work


@pytest.mark.parametrize("overrides, says", [
    (["train.epochs=2"], "accountant: prv (privacy.accountant); cross-check, epsilon after 36 steps"),
    (["train.steps=20", "privacy.accountant=rdp"], "accountant: rdp (privacy.accountant)"),
    (["privacy=none", "method=mezo"], "note: non-private run"),
])
def test_the_plan_is_printed_and_nothing_is_written(overrides, says, elsewhere, capsys):
    run_dir = elsewhere / "run"
    assert plan_only([*overrides, f"hydra.run.dir={run_dir}"]) == 0
    out, err = capsys.readouterr()
    assert says in out and "n = 1165 private examples" in out and "no model read any example" in out
    assert out.rstrip().endswith("nothing was trained and no run directory was written") and not err
    assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize("overrides, says", [
    (["privacy.accountant=xx"], "unknown privacy.accountant 'xx' (choices: pld, prv, rdp)"),
    (["train.batch_size=5000"], "train.batch_size=5000 exceeds the 1165 private training examples"),
    (["-m", "method=sgd,dpsgd"], "--plan plans one run"),
])
def test_a_bad_command_line_is_one_line_and_exit_2(overrides, says, elsewhere, capsys):
    assert plan_only(overrides) == 2
    out, err = capsys.readouterr()
    assert not out and err.count("\n") == 1 and err.startswith("pazo: error: ") and says in err
    assert list(elsewhere.iterdir()) == []


#: the command line the plans below are given (a given sigma: nothing calibrated)
PLANNED = ["train.steps=3", "method=dpzero", "privacy.sigma=2.0"]


def _plan_on_two_ranks(rank: int, differ: set[str], cache, other_asked: dict | None = None) -> tuple[int, str, str]:
    """`plan_only` as rank `rank` of 2 under torchrun, the other rank's facts this rank's but for the
    keys in `differ`, and what it was asked this rank's unless `other_asked` (`asked_facts`) is given
    (the ranks' exchanges, `all_gather_object`, played here); exit status, stdout, stderr."""
    import contextlib
    import io

    import pazo.privacy.plan
    from pazo.run import distributed

    def join(timeout_s, asked=None):
        patch.setattr(distributed, "_CURRENT", distributed.Group(rank, 2))
        if asked is not None:
            distributed.current().compare_asked(asked)
        return distributed.current()

    def gather(gathered, facts, group=None):
        if "plan" in facts:   # what the ranks were asked, as they join
            other = facts if other_asked is None else other_asked
        else:
            other = {k: (f"other {v}" if k in differ else v) for k, v in facts.items()}
        gathered[:] = [facts, other] if rank == 0 else [other, facts]

    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        patch.setenv("PAZO_CACHE_DIR", str(cache))
        patch.setenv("RANK", str(rank))
        patch.setenv("WORLD_SIZE", "2")
        patch.setattr(distributed, "join", join)
        patch.setattr(distributed.dist, "all_gather_object", gather)
        # the plan's cross-check by the other accountants (seconds a plan) is a line of the plan: not needed here
        patch.setattr(pazo.privacy.plan, "cross_check", lambda plan, steps, cache_dir=None: {})
        code = plan_only(PLANNED)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def plan_cache(tmp_path_factory):
    """One sigma cache for the module's plans (a plan calibrates its sigma)."""
    return run_cache(tmp_path_factory.mktemp("plan_cache"))


@settings(deadline=None, max_examples=5)
@given(rank=st.integers(0, 1), differ=st.sets(st.sampled_from(["config", "data", "code"])))
@example(rank=1, differ={"config"})   # was: each rank printed its plan, exit 0: a plan never joined the ranks
def test_a_plan_on_several_processes_compares_the_ranks_as_a_run_does(plan_cache, rank, differ):
    """Under torchrun a plan's ranks compare config, data and code (`Group.agree`, the run's check): any
    that differ, one line from each rank, as a run's ranks say it, exit 2, nothing printed of the
    plan; none: rank 0 prints the plan, saying the ranks agree, the others nothing."""
    code, out, err = _plan_on_two_ranks(rank, differ, plan_cache)
    if differ:
        named = ", ".join(k for k in ("config", "data", "code") if k in differ)
        assert code == 2 and not out and err.count("\n") == 1, err
        assert err.startswith(f"pazo: error: {'rank 1: ' if rank else ''}the 2 processes of this run differ in "
                              f"{named} (rank 1 from rank 0)"), err
    else:
        assert code == 0 and not err, err
        assert ("ranks: the 2 processes run the same config, data and code" in out) == (rank == 0)
        assert bool(out) == (rank == 0)


@settings(deadline=None, max_examples=4)
@given(rank=st.integers(0, 1), other_plans=st.booleans(),
       change=st.sampled_from([None, "method.lr=0.5", "train.steps=4", "-privacy.sigma", "hydra.run.dir=elsewhere"]))
@example(rank=1, other_plans=False, change=None)   # was: rank 1 planned, rank 0 ran: each waited until the timeout
def test_ranks_asked_differently_end_at_once_naming_the_difference(plan_cache, rank, other_plans, change):
    """A plan's ranks compare what they were asked as they join: the other rank given no --plan, or other
    overrides (one more, one less, another value), ends every rank at once with one line naming the
    difference, exit 2, no plan printed; where it differs only in hydra.* (rank 0's run directory), or
    not at all, the plan goes on."""
    from pazo.run import distributed

    other = [a for a in PLANNED if change is None or a.split("=")[0] != change.lstrip("-").split("=")[0]]
    if change is not None and not change.startswith("-"):
        other.append(change)
    code, out, err = _plan_on_two_ranks(rank, set(), plan_cache, distributed.asked_facts(other, plan=other_plans))
    key = None if change is None else change.lstrip("-").split("=")[0]
    said = ([] if other_plans else [f"--plan on rank {rank} only"]) + (
        [] if key in (None, "hydra.run.dir") else [f"{key} on rank {rank} only"] if change.startswith("-")
        else [f"{key} with another value"] if any(a.startswith(f"{key}=") for a in PLANNED)
        else [f"{key} on rank {1 - rank} only"])
    if not said:
        assert code == 0 and not err, err
        return
    assert code == 2 and not out and err.count("\n") == 1, err
    assert err.startswith(f"pazo: error: {'rank 1: ' if rank else ''}the 2 processes of this run were given "
                          f"different command lines (rank 1 from rank 0: {'; '.join(said)})"), err


def _joined_as(rank: int):
    """`distributed.join` as rank `rank` of 2 meets it, its exchanges played by `all_gather_object`."""
    from pazo.run import distributed

    def join(timeout_s, asked=None):
        group = distributed.Group(rank, 2)
        if asked is not None:
            group.compare_asked(asked)
        return group
    return join


@pytest.mark.parametrize("rank", [0, 1])
@pytest.mark.parametrize("other_refused", ["the same", "another mistake", None])
def test_a_plan_of_what_several_processes_cannot_share_is_refused_as_a_run_is(rank, other_refused, elsewhere, capsys,
                                                                                monkeypatch):
    """Under torchrun a plan of a method the ranks cannot share is refused before they join (was: each
    rank printed a plan of a run that would be refused); the rank then joins the other and tells it in
    their first exchange (played here), so that the line is printed once: by rank 0, or, where rank 0
    accepted its own command line or refused another mistake, by rank 1 too (`rank 1: ...`; was:
    nothing, rank 1 assuming rank 0 said it)."""
    from pazo.run import distributed

    said = "method 'sgd' does not run on several processes yet"

    def gather(gathered, facts, group=None):
        mistake = facts["refused"] if other_refused == "the same" else "unknown key train.stepz"   # (this rank's)
        other = (distributed.failure_facts(ConfigError(mistake), distributed.REFUSED) if other_refused
                 else {"config": "c"})
        gathered[:] = [facts, other] if rank == 0 else [other, facts]

    monkeypatch.setenv("RANK", str(rank))
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setattr(distributed, "join", _joined_as(rank))
    monkeypatch.setattr(distributed.dist, "all_gather_object", gather)
    assert plan_only(["method=sgd", "privacy=none"]) == 2
    out, err = capsys.readouterr()
    silent = rank == 1 and other_refused == "the same"   # rank 0 says it: its line is the run's
    assert not out and err.count("\n") == (0 if silent else 1), err
    assert silent or err.startswith(f"pazo: error: {'rank 1: ' if rank else ''}{said}"), err
