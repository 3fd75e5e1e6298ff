"""A name typed wrong gets the close match, wherever a name is chosen (issue #60): one rule,
`pazo.errors.unknown_choice` (difflib's nearest name at a ratio of 0.6, then the choices). Was:
`pazo-sweep demo --methods pazom` and `private_zo(method="pazom")` listed the choices only, and
`pazo-report configs train` called `train` an unknown part without saying where its keys are; the
audit's threat and debug break, a prompt task, a model's dtype, attention and task, a logger, a
sweep's cluster, selection and entry, and a table's selection listed their choices only."""
import pytest
import yaml
from hypothesis import given, settings, strategies as st

from pazo import CONFIG_DIR
from pazo.audit.run import THREATS, AuditConfig
from pazo.config_schema import LOGGERS, LoggerSchema
from pazo.errors import ConfigError, close_match
from pazo.models.hf_lm import DTYPES, CausalLMTask, load_hf_lm, resolve_dtype
from pazo.privacy.mechanisms import DEBUG_BREAKS
from pazo.run.results import SELECTIONS, select_configs
from pazo.sweep.launchers import SubmititLauncher
from pazo.sweep.spec import ENTRIES, SELECTION_MODES, SpecSchema
from pazo.text.prompts import TASKS, task_spec


def _sweep_methods(name):
    from pazo.sweep.spec import load_spec, select_methods

    select_methods(load_spec("demo"), name)


def _library_method(name):
    from pazo.private import _method_config

    _method_config(name, {}, 1.0, None)


def _registry(name):
    from pazo.methods import METHODS

    METHODS.get(name)


def _configs_part(name):
    from pazo.report.config_reference import main

    main([name])


def _bench_command(name):
    from pazo.bench import main

    assert main([name]) == 2


def _audit(key):
    def audit(name):
        AuditConfig.from_cfg({"canaries": 100, "threat": "black_box", "confidence": 0.95, "canary_scale": 1.0,
                              "delta": None, "debug_break": None, key: name})
    return audit


def _sweep_spec(key):
    def spec(name):
        SpecSchema(name="s", settings=["digits"], methods=["mezo"], epsilons=[1.0], **{key: name})
    return spec


#: sites that check a name against a fixed list: the site, and its list
LISTED = {"audit.threat": (_audit("threat"), THREATS), "audit.debug_break": (_audit("debug_break"), DEBUG_BREAKS),
          "dataset.task": (task_spec, TASKS), "model.dtype": (resolve_dtype, DTYPES),
          "model.attention": (lambda name: load_hf_lm("/nonexistent", "causal", attention=name), ("eager", "sdpa")),
          "model.task": (lambda name: CausalLMTask(None, None, name), ("classification", "generation")),
          "logger.report_to": (lambda name: LoggerSchema(report_to=[name]), LOGGERS),
          "sweep cluster": (lambda name: SubmititLauncher(cluster=name), ("slurm", "local", "debug")),
          "sweep selection": (_sweep_spec("selection"), SELECTION_MODES),
          "sweep entry": (_sweep_spec("entry"), ENTRIES),
          "table selection": (lambda name: select_configs(None, selection=name), SELECTIONS)}


def _choices(site):
    from pazo.bench import COMMANDS
    from pazo.methods import METHODS, method_names
    from pazo.report.config_reference import GROUPS, PARTS
    from pazo.sweep.spec import load_spec

    if site in LISTED:
        return sorted(LISTED[site][1])
    return {"sweep --methods": load_spec("demo")["methods"], "private_zo method": method_names("zeroth_order"),
            "registry": METHODS.names(), "configs part": [*PARTS, *GROUPS], "bench command": list(COMMANDS)}[site]


SITES = {"sweep --methods": _sweep_methods, "private_zo method": _library_method, "registry": _registry,
         "configs part": _configs_part, "bench command": _bench_command,
         **{site: call for site, (call, _) in LISTED.items()}}


def _said(site, name, capsys) -> str:
    try:
        SITES[site](name)
    except (ConfigError, ValueError) as err:
        return str(err)
    except SystemExit:
        pass
    return capsys.readouterr().err


@st.composite
def typo(draw, choices):
    """A choice with one character dropped, doubled or two neighbours swapped, that is no choice."""
    name = draw(st.sampled_from(sorted(choices)))
    i = draw(st.integers(0, len(name) - 2))
    edit = draw(st.sampled_from(["drop", "double", "swap"]))
    wrong = {"drop": name[:i] + name[i + 1:], "double": name[:i] + name[i] + name[i:],
             "swap": name[:i] + name[i + 1] + name[i] + name[i + 2:]}[edit]
    return wrong


@pytest.mark.parametrize("site", list(SITES))
def test_a_name_typed_wrong_names_the_close_match_and_the_choices(site, capsys):
    choices = _choices(site)

    @settings(max_examples=15, deadline=None)
    @given(wrong=typo(choices))
    def check(wrong):
        if wrong in choices or wrong in _choices("registry"):   # (a first-order method's name: another rule)
            return
        said = _said(site, wrong, capsys)
        match = close_match(wrong, choices)
        assert repr(wrong) in said and all(c in said for c in choices), said
        assert (f"did you mean {match!r}?" in said) if match else "did you mean" not in said, said
    check()


TOP_KEYS = sorted(k for k in yaml.safe_load((CONFIG_DIR / "config.yaml").read_text()) if k != "defaults")


@pytest.mark.parametrize("key", TOP_KEYS)
def test_a_config_key_given_as_a_part_says_which_part_holds_it(key, capsys):
    """`pazo-report configs train`: the train.* keys are in part config (was: "unknown part")."""
    from pazo.report.config_reference import GROUPS, PARTS

    if key in (*PARTS, *GROUPS):
        return
    with pytest.raises(SystemExit) as stop:
        _configs_part(key)
    said = capsys.readouterr().err.strip()
    assert stop.value.code == 2 and "\n" not in said
    assert f"{key} is a key of config.yaml, in part config (pazo-report configs config)" in said
