"""One model's weights are one file, byte for byte: `model.safetensors` of the same parameters written
again (another call, another process: the same run on one process and on two, compared with `cmp` as
the many-processes guide does) has the same bytes. safetensors writes its metadata in the order of a
Rust hash map, which changes from call to call; pazo writes it sorted."""
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pazo.run.weights import read_weights, save_weights, state_bytes

names = st.text("abcxyzü._0123", min_size=1, max_size=8)
shapes = st.lists(st.integers(1, 4), min_size=0, max_size=3)
dtypes = st.sampled_from([torch.float32, torch.float16, torch.bfloat16, torch.int64])


@st.composite
def states(draw) -> dict[str, torch.Tensor]:
    """A state dict of random names, shapes and dtypes, some names tied to another's tensor."""
    own = draw(st.dictionaries(names, st.tuples(shapes, dtypes), min_size=1, max_size=5))
    state = {name: (torch.arange(max(1, int(torch.tensor(shape).prod())), dtype=torch.float64) * 0.37)
             .reshape(shape).to(dtype) for name, (shape, dtype) in own.items()}
    for name in draw(st.lists(names.filter(lambda n: n not in state), max_size=2, unique=True)):
        state[name] = state[draw(st.sampled_from(sorted(own)))]   # (a tied weight: the same tensor)
    return state


@settings(max_examples=40, deadline=None)
@given(state=states())
def test_the_same_weights_are_the_same_bytes_every_time_and_read_back_whole(state, tmp_path_factory):
    written = {state_bytes(state) for _ in range(12)}   # (unsorted: two orders of 2 keys, 12 draws)
    assert len(written) == 1, "the same weights gave files with different bytes"
    path = tmp_path_factory.mktemp("weights") / "model.safetensors"
    module = torch.nn.Module()
    module.state_dict = lambda: state
    save_weights(path, module)
    assert path.read_bytes() in written
    back = read_weights(path)
    assert set(back) == set(state) and all(torch.equal(back[name], state[name]) for name in state)
