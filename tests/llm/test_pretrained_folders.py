"""A model path that names a folder holding no tokenizer or model transformers can build (an empty
folder, a folder of other files) is one line naming the folder and the key to set (a user's mistake:
exit 2), never transformers' traceback; was: `pazo-train dataset=sst2 model=hf_causal_lm
model.path=<an empty folder>` ended in a ValueError's stack."""
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from pazo.errors import DataMissingError
from pazo.pretrained import load_pretrained

pytestmark = pytest.mark.llm

#: files a folder that is not a save_pretrained folder may hold
OTHER_FILES = st.dictionaries(st.sampled_from(["README.md", "notes.txt", "weights.npy", "vocab.csv", "data.json"]),
                              st.binary(max_size=64), max_size=3)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(files=OTHER_FILES, kind=st.sampled_from(["tokenizer", "model"]),
       key=st.sampled_from(["model.path", "model.path (dataset.tokenizer)"]))
def test_a_folder_without_a_tokenizer_or_model_is_one_line_naming_it(files, kind, key, tmp_path_factory):
    folder = tmp_path_factory.mktemp("not_a_model")
    for name, content in files.items():
        (folder / name).write_bytes(content)
    with pytest.raises(DataMissingError) as refused:
        load_pretrained(str(folder), kind, key=key)
    said = str(refused.value)
    assert "\n" not in said and str(folder) in said and key in said, said


@pytest.mark.parametrize("kind", ["causal", "masked"])
def test_a_model_folder_holding_a_tokenizer_alone_is_one_line_naming_it(kind, tmp_path):
    """Was: transformers' ValueError ("Unrecognized model ...") and its stack, out of `pazo-train`."""
    from llm_fixtures import write_tiny_causal_lm
    from pazo.models.hf_lm import load_hf_lm

    folder = write_tiny_causal_lm(tmp_path / "opt")
    for file in folder.iterdir():
        if not file.name.startswith(("tokenizer", "special_tokens", "vocab", "merges")):
            file.unlink()
    with pytest.raises(DataMissingError) as refused:
        load_hf_lm(str(folder), kind)
    said = str(refused.value)
    assert "\n" not in said and str(folder) in said and "model.path" in said, said
