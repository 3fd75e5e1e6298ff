"""Every bad model or tokenizer path is one user error naming the path and the key to set, for each
loader (the causal and masked LMs of `pazo.models.hf_lm`, the prompt classifier's masked LM and the
tokenizers of `pazo.pretrained`), by one policy (`pazo.pretrained.reading_pretrained`): a path on disk
that transformers cannot read (an empty folder, a tokenizer alone, a config that is not JSON or
names an unknown model type, broken weights, a file where a folder belongs) is DataCorruptError; a
name that is neither on disk nor in the Hugging Face cache (a Hub-id-like string with several
slashes or characters the Hub refuses) is DataMissingError; a Hub id whose cached copy cannot be
read is DataCorruptError. Was: each loader had its own policy, and a file, a config that is not
JSON, a tokenizer_config.json that is a list, or a cached copy naming an unknown model type ended
in "missing" (wrongly), a TypeError or KeyError, or transformers' ValueError and its stack."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, example, given, settings, strategies as st

from pazo.errors import DataCorruptError, DataMissingError
from pazo.pretrained import load_pretrained

pytestmark = pytest.mark.llm


def _causal(path, random_init=False):
    from pazo.models.hf_lm import load_hf_lm
    return load_hf_lm(path, "causal", random_init=random_init)


def _masked(path):
    from pazo.models.hf_lm import load_hf_lm
    return load_hf_lm(path, "masked")


#: loader -> (how it is called on a path, the key its message must name)
LOADERS = {
    "causal LM": (_causal, "model.path"),
    "causal LM, random weights": (lambda path: _causal(path, random_init=True), "model.path"),
    "masked LM": (_masked, "model.path"),
    "prompt classifier's masked LM": (lambda path: load_pretrained(path, "model"), "model.path"),
    "model's tokenizer": (lambda path: load_pretrained(path, "tokenizer", model_class="AutoModelForCausalLM"),
                          "model.path"),
    "data side's tokenizer": (lambda path: load_pretrained(path, "tokenizer", key="model.path (dataset.tokenizer)",
                                                           download_key="dataset.download",
                                                           model_class="AutoModelForMaskedLM"),
                              "model.path (dataset.tokenizer)"),
}

#: a Hub-id-like name that is not on disk: one to five parts (the Hub takes one or two), of letters
#: and the characters the Hub refuses (`%`, a space, `..`, `~`, a backslash, quotes, a newline)
PART = st.text(st.sampled_from("ab9-_.%~ \\'\"\n!"), min_size=1, max_size=6)
HUB_LIKE = st.lists(PART, min_size=1, max_size=5).map("/".join)

#: what a save_pretrained folder holds, given broken contents
FILE_NAMES = ["config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
              "merges.txt", "model.safetensors", "pytorch_model.bin", "adapter_config.json", "generation_config.json"]
CONTENTS = st.sampled_from([b"", b"{", b"[1, 2]", b"null", b'{"a": 1}', b"\xff\xfe\x00 not text",
                            b'{"model_type": "nonesuch"}', b'{"model_type": 3}', b'{"tokenizer_class": "Nope"}',
                            b"PK\x03\x04 not a zip"]) | st.binary(max_size=48)
BROKEN_FILES = st.dictionaries(st.sampled_from(FILE_NAMES), CONTENTS, max_size=4)

#: a folder on disk: empty, of broken files, a tokenizer alone (and broken files), a good config
#: and broken weights
FOLDERS = st.one_of(st.just(("empty", {})), st.tuples(st.just("broken"), BROKEN_FILES),
                    st.tuples(st.just("tokenizer alone"), BROKEN_FILES.map(
                        lambda files: {k: v for k, v in files.items() if not k.startswith("tokenizer")})),
                    st.tuples(st.just("broken weights"), st.dictionaries(
                        st.sampled_from(["model.safetensors", "pytorch_model.bin"]), CONTENTS, min_size=1)))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny OPT's tokenizer and config (random weights), written once."""
    from llm_fixtures import write_tiny_causal_lm
    return write_tiny_causal_lm(tmp_path_factory.mktemp("tiny") / "opt")


@pytest.fixture
def elsewhere(tmp_path_factory, monkeypatch):
    """An empty working folder (a relative name is not on disk) and an empty Hugging Face cache."""
    import huggingface_hub.constants as hub

    monkeypatch.chdir(tmp_path_factory.mktemp("cwd"))
    cache = tmp_path_factory.mktemp("hf_cache")
    monkeypatch.setattr(hub, "HF_HUB_CACHE", str(cache))
    return cache


def fill(folder, kind: str, files: dict, tiny) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    if kind == "tokenizer alone":
        for file in tiny.glob("tokenizer*"):
            shutil.copy(file, folder / file.name)
    if kind == "broken weights":
        shutil.copy(tiny / "config.json", folder / "config.json")
    for name, content in files.items():
        (folder / name).write_bytes(content)


def on_disk(name: str) -> bool:
    try:
        return Path(name).expanduser().exists()
    except (RuntimeError, OSError):   # (`~nobody/x`: no such user's home; a name too long for a file's)
        return False


def forms(path: str) -> tuple[str, ...]:
    """How a message may show `path`: as it is, quoted, or with its newlines escaped."""
    return path, repr(path), path.encode("unicode_escape").decode("ascii")


def refusal(loader: str, path: str, expected: type) -> str:
    """The message `loader` refuses `path` with, checked: `expected` exactly, one line, naming the path
    and the loader's key."""
    load, key = LOADERS[loader]
    with pytest.raises(DataMissingError) as refused:
        load(path)
    said = str(refused.value)
    assert type(refused.value) is expected, (type(refused.value), said)
    assert "\n" not in said and key in said, said
    assert any(form in said for form in forms(path)), said
    return said


@pytest.mark.parametrize("loader", list(LOADERS))
@settings(max_examples=12, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(folder=FOLDERS, name=st.text(st.sampled_from("abc 9_\n"), min_size=1, max_size=8).filter(str.strip))
def test_a_folder_transformers_cannot_read_is_one_line_naming_it(loader, folder, name, tiny, elsewhere,
                                                                 tmp_path_factory):
    kind, files = folder
    assume(not (kind == "tokenizer alone" and "tokenizer" in loader))   # (a tokenizer's good folder)
    assume(not (kind == "broken weights" and "random" in loader))       # (random weights read no weights)
    where = tmp_path_factory.mktemp("model") / name
    fill(where, kind, files, tiny)
    refusal(loader, str(where), DataCorruptError)


@pytest.mark.parametrize("loader", list(LOADERS))
@settings(max_examples=12, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=HUB_LIKE | st.integers(256, 400).map(lambda n: "m" * n))   # (or too long for a file's name)
@example(name="m" * 300)
def test_a_name_neither_on_disk_nor_in_the_cache_is_missing(loader, name, elsewhere):
    assume(not on_disk(name))   # (`~/.x` may be)
    said = refusal(loader, name, DataMissingError)
    assert "is missing" in said


@pytest.mark.parametrize("loader", list(LOADERS))
def test_a_file_where_a_folder_belongs_is_said_so(loader, elsewhere, tmp_path):
    file = tmp_path / "model.safetensors"
    file.write_bytes(b"weights")
    assert "(a file, not a folder)" in refusal(loader, str(file), DataCorruptError)


def cache_broken_copy(cache, name: str, kind: str, files: dict, tiny) -> None:
    """`name` in the Hugging Face cache (`HF_HUB_CACHE`) as a download leaves it, its snapshot holding
    `files` (`fill`'s kinds)."""
    repo = cache / ("models--" + name.replace("/", "--"))
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("0" * 40)
    fill(repo / "snapshots" / ("0" * 40), kind, files, tiny)


@pytest.mark.parametrize("loader", list(LOADERS))
@settings(max_examples=8, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(["org/tiny", "tiny-model"]),
       config=st.sampled_from([b'{"model_type": "nonesuch"}', b'{"model_type": 3}', b"[1, 2]", b"{", b"{}"]),
       with_tokenizer=st.booleans())
def test_a_cached_copy_that_cannot_be_read_is_one_line_naming_it(loader, name, config, with_tokenizer, tiny,
                                                                  tmp_path_factory, monkeypatch):
    """Was (a config naming an unknown model type): `load_hf_lm` re-raised transformers' ValueError,
    `load_pretrained` said the model was missing from the cache it was in."""
    import huggingface_hub.constants as hub

    assume(not (with_tokenizer and "tokenizer" in loader))   # (a tokenizer's good copy)
    cache = tmp_path_factory.mktemp("hf_cache")
    monkeypatch.setattr(hub, "HF_HUB_CACHE", str(cache))
    cache_broken_copy(cache, name, "tokenizer alone" if with_tokenizer else "broken", {"config.json": config}, tiny)
    said = refusal(loader, name, DataCorruptError)
    assert "its copy in the Hugging Face cache" in said, said


@pytest.mark.parametrize("raised", [RuntimeError("CUDA error: device-side assert triggered"),
                                    ImportError("device_map needs accelerate"), MemoryError()])
def test_what_the_machine_lacks_is_not_said_as_unreadable_files(raised, tmp_path):
    """A device's error, a missing package or a lack of memory while transformers reads a model is
    raised as it is: the files may be fine, and "cannot be read: set model.path" would send the
    user to the wrong place."""
    from pazo.pretrained import reading_pretrained

    with pytest.raises(type(raised)):
        with reading_pretrained(str(tmp_path), what="model", key="model.path", download_key="model.download",
                                download=False, model_class="AutoModelForCausalLM"):
            raise raised


def test_a_cached_model_transformers_cannot_build_ends_a_run_in_one_line(tiny, tmp_path):
    """End to end (`python -m pazo.train`, a fresh process): the Hub id's cached copy holds a
    tokenizer (the data side reads it) and a config naming an unknown model type. Was: the model
    loader's ValueError and its stack, exit 1."""
    from llm_fixtures import write_sst2

    cache = tmp_path / "hf_cache"
    cache_broken_copy(cache, "org/tiny", "tokenizer alone", {"config.json": b'{"model_type": "nonesuch"}'}, tiny)
    write_sst2(tmp_path / "data", n_train=20, n_val=8, n_test=4)
    run_dir = tmp_path / "run"
    env = {**{k: v for k, v in os.environ.items() if k != "PAZO_PLUGINS"}, "HF_HUB_CACHE": str(cache),
           "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-m", "pazo.train", "model=hf_causal_lm", "model.path=org/tiny",
                          "dataset=sst2", f"dataset.root={tmp_path / 'data'}", "dataset.n_train=12", "dataset.n_val=4",
                          "method=dpzero", "train.batch_size=4", "privacy.sigma=5", f"hydra.run.dir={run_dir}"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    console = out.stdout + out.stderr
    errors = [line for line in console.splitlines() if line.startswith("pazo: error:")]
    assert out.returncode == 2 and len(errors) == 1 and "Traceback" not in console, console[-3000:]
    assert "'org/tiny'" in errors[0] and "model.path" in errors[0], errors
    assert not run_dir.exists()
