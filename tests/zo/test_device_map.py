"""A model spread over several devices (`model.device_map`): every tensor added to the parameters
is put on its parameter's device, the vectorised engine is refused (auto picks inplace), and a
dispatched model's step is the step of the same model on one device. The CPU has one device, so the
per-device moves are checked with a parameter on the `meta` device and a spy on the fused add; the
real split is the two-GPU test (skipped without two GPUs)."""
import numpy as np
import pytest
import torch
from torch import nn

from llm_fixtures import tiny_opt_model, write_opt_and_sst2
from pazo.config_schema import EngineSchema
from pazo.data.base import TensorSplit
from pazo.data.prompt_tasks import encode_causal
from pazo.errors import ConfigError
from pazo.methods.base import host_stats
from pazo.models.functional import FunctionalModel
from pazo.train import run
from pazo.zo.directions import SeededDirections
from pazo.zo.engines import apply_flat_update, choose_engine, shift
from pazo.zo.half_precision import parameter_pieces
from pazo.zo.placement import to_param_devices

META = torch.device("meta")


def test_to_param_devices_moves_only_the_misplaced_tensors():
    params = [torch.zeros(2, 3), torch.zeros(4, device=META), torch.zeros(5)]
    tensors = [torch.ones(2, 3), torch.full((4,), 2.0), torch.full((5,), 3.0)]
    out = to_param_devices(tensors, params)
    assert [t.device for t in out] == [torch.device("cpu"), META, torch.device("cpu")]
    assert out[0] is tensors[0] and out[2] is tensors[2]                # in place already: not copied
    assert out[1].shape == (4,)
    same = to_param_devices(tensors[::2], params[::2])                  # all in place: the same list back
    assert same is not None and all(a is b for a, b in zip(same, tensors[::2]))


def split_module() -> nn.Module:
    """A two-layer model with its second layer on the meta device: a stand-in for a second GPU."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 2, device=META))


@pytest.fixture
def spy_fused_add(monkeypatch):
    """torch._foreach_add_ that fails, as CUDA would, when a tensor is not on its parameter's device
    (the meta device itself accepts CPU operands)."""
    real = torch._foreach_add_

    def checked(params, tensors, **kw):
        for p, t in zip(params, tensors):
            assert t.device == p.device, f"a {t.device} tensor added to a {p.device} parameter"
        return real(params, tensors, **kw)

    monkeypatch.setattr(torch, "_foreach_add_", checked)


def test_shift_and_flat_update_put_each_piece_on_its_parameters_device(spy_fused_add):
    model = FunctionalModel(split_module())
    assert model.devices == [torch.device("cpu"), META] and model.device == torch.device("cpu")
    before = model.params[0].detach().clone()
    dirs = SeededDirections(model.shapes, [3], device="cpu")          # drawn on one device (the first's)
    u = dirs.tensors(0)
    with torch.no_grad():
        shift(model, dirs, 0, 0.5)
    assert torch.equal(model.params[0], before + 0.5 * u[0])         # the CPU part moved by the direction
    assert model.params[2].device == META
    apply_flat_update(model, torch.ones(model.dim), lr=0.25)
    assert torch.equal(model.params[0], before + 0.5 * u[0] - 0.25)
    reverse = FunctionalModel(nn.Sequential(nn.Linear(4, 3, device=META), nn.Linear(3, 2)))
    flat = reverse.flat_params()                                     # gathered on the first parameter's device
    assert flat.device == META and flat.shape == (reverse.dim,)


def test_the_exact_shift_serves_each_tensor_on_its_parameters_device():
    model = FunctionalModel(split_module())
    dirs = SeededDirections(model.shapes, [3], device="cpu")
    served = [(i, u.device, piece.device) for i, _, piece, u in parameter_pieces(dirs, 0, model.params)]
    assert [i for i, _, _ in served] == list(range(len(model.params)))
    assert all(u == p == model.params[i].device for i, u, p in served)


def test_on_the_fly_queries_build_each_parameters_perturbed_copy_on_its_device():
    from pazo.zo.half_precision import PerturbedForward

    model = FunctionalModel(split_module())
    dirs = SeededDirections(model.shapes, [3], device="cpu")          # drawn on the first parameter's device
    forward = PerturbedForward(model.module, model.params)
    forward.point = (dirs, 0, 0.5)
    built = [forward.perturbed(i) for i in range(len(model.params))]
    assert [t.device for t in built] == [p.device for p in model.params]
    assert torch.equal(built[0], model.params[0] + 0.5 * dirs.tensors(0)[0])


def test_vectorised_is_refused_and_auto_picks_inplace_on_several_devices():
    model = FunctionalModel(split_module())
    with pytest.raises(ConfigError, match=r"engine.name=vectorised .* on 2 devices \(cpu, meta.*inplace or auto"):
        choose_engine(EngineSchema(name="vectorised"), model, zeroth_order=True, queries=1)
    name, reason = choose_engine(EngineSchema(name="auto"), model, zeroth_order=True, queries=1)
    assert name == "inplace" and "2 devices" in reason
    assert choose_engine(EngineSchema(name="inplace"), model, zeroth_order=True, queries=1)[0] == "inplace"


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return write_opt_and_sst2(tmp_path_factory.mktemp("devmap"))


# the tiny OPT's modules, each placed by name (accelerate's dispatch, as model.device_map=auto does)
CPU_MAP = {"model.decoder.embed_tokens": "cpu", "model.decoder.embed_positions": "cpu",
           "model.decoder.layers.0": "cpu", "model.decoder.layers.1": "cpu",
           "model.decoder.final_layer_norm": "cpu", "lm_head": "cpu"}


@pytest.mark.llm
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_a_dispatched_model_takes_the_same_step_as_without_device_map(root, make_method, dtype):
    plain, mapped = tiny_opt_model(root, dtype), tiny_opt_model(root, dtype, CPU_MAP)
    assert mapped.module.lm.hf_device_map == CPU_MAP and mapped.input_device == torch.device("cpu")
    assert all(torch.equal(a, b) for a, b in zip(plain.params, mapped.params))
    x, y = sst2_batch(plain.module.tokenizer, plain.module.pad_id)
    stats = []
    for model in (plain, mapped):
        method = make_method("dpzero", model, {"lr": 1e-2, "clip": 1.0, "q": 2}, sigma=1.0, b=4, engine="inplace")
        stats.append(method.step(x, y, 1))
    assert stats[0] == stats[1] and np.isfinite(stats[0]["loss"])
    assert all(torch.equal(a, b) for a, b in zip(plain.params, mapped.params))


LORA = {"enabled": True, "rank": 4, "alpha": 8, "dropout": 0.0, "target_modules": None}


def sst2_batch(tok, pad_id):
    rows = [encode_causal(tok, t, 32) for t in ["a great movie, so. It was", "bad acting, so. It was",
                                                 "the best story, so. It was", "a terrible film. It was"]]
    x = torch.full((4, max(map(len, rows))), pad_id)
    for i, r in enumerate(rows):
        x[i, :len(r)] = torch.tensor(r)
    return x, torch.tensor([1, 0, 1, 0])


@pytest.mark.llm
@pytest.mark.parametrize("name, cfg", [
    ("dpsgd", {"lr": 0.1, "clip": 1.0}),                                   # per-example adapter gradients
    ("pazo_m", {"lr": 1e-2, "clip": 1.0, "q": 2, "public_batch_size": 2}),  # a public gradient + the ZO step
])
def test_first_order_parts_on_a_dispatched_lora_model_take_the_undispatched_step(root, make_method, name, cfg):
    """Gradients through accelerate's hooks (DP-SGD's per-example adapter gradients under vmap, PAZO-M's
    public gradient) give the step of the same LoRA model without a device map."""
    plain, mapped = tiny_opt_model(root, lora=LORA), tiny_opt_model(root, device_map=CPU_MAP, lora=LORA)
    assert all("lora_" in n for n in mapped.names) and mapped.module.lm.hf_device_map == CPU_MAP
    x, y = sst2_batch(plain.module.tokenizer, plain.module.pad_id)
    before = [p.detach().clone() for p in plain.params]
    stats = []
    for model in (plain, mapped):
        method = make_method(name, model, cfg, sigma=1.0, b=4, engine="inplace", public=TensorSplit(x, y))
        stats.append(method.step(x, y, 1))
    assert stats[0] == stats[1] and np.isfinite(stats[0]["loss"])
    assert all(torch.equal(a, b) for a, b in zip(plain.params, mapped.params))
    assert any(not torch.equal(a, b) for a, b in zip(plain.params, before))        # the step moved the adapters


class _ElsewhereInput(nn.Module):
    """Parameters on the CPU, input taken on the meta device: a stand-in for a model whose input
    embeddings sit on another GPU than its first trainable parameter (LoRA on a split model)."""
    input_device = META

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 2)


def test_batches_go_to_the_input_device_and_the_methods_vectors_to_the_parameters(make_method):
    model = FunctionalModel(_ElsewhereInput())
    assert model.input_device == META and model.device == torch.device("cpu")
    method = make_method("pazo_m", model, {"lr": 0.1, "clip": 1.0, "q": 2, "public_batch_size": 2}, sigma=1.0,
                         b=4, engine="inplace", public=TensorSplit(torch.zeros(4, 4), torch.zeros(4)),
                         device=model.device)
    x, y = method.public_batches().sample()
    assert x.device == META and y.device == META                           # where the model takes its input
    u = method.random_directions()
    assert u.device == torch.device("cpu") and all(t.device == torch.device("cpu") for t in u.tensors(0))
    assert method.privatizer.generator.device == torch.device("cpu")       # noise made beside the parameters


@pytest.mark.llm
def test_a_run_with_a_device_map_records_its_devices(root, hydra_cfg, tmp_path):
    s = run(hydra_cfg("model=hf_causal_lm", f"model.path={root / 'opt'}", f"dataset.root={root}", "dataset=sst2",
                      "model.attention=eager", "model.device_map={model:cpu,lm_head:cpu}", "dataset.n_train=16",
                      "dataset.n_val=4", "train.batch_size=8", "train.steps=2", "method=dpzero",
                      "privacy.sigma=5.0", "engine.name=inplace"), tmp_path / "run")
    assert s["status"] == "finished" and s["parameter_devices"] == ["cpu"] and s["device"] == "cpu"
    assert 0 <= s["final_test_accuracy"] <= 1


@pytest.mark.gpu
@pytest.mark.llm
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_two_gpus_take_the_step_of_one(root, make_method):
    """The tiny OPT split over cuda:0 and cuda:1 takes DPZero's step (in-place engine, directions
    drawn on cuda:0) as the same model on cuda:0 alone, in float32 and in float16 (its queries on
    the fly, each perturbed weight built on its own GPU)."""
    split = {"model.decoder.embed_tokens": 0, "model.decoder.embed_positions": 0, "model.decoder.layers.0": 0,
             "model.decoder.layers.1": 1, "model.decoder.final_layer_norm": 1, "lm_head": 0}
    for dtype in ("float32", "float16"):
        one = tiny_opt_model(root, dtype, {"": 0})
        two = tiny_opt_model(root, dtype, split)
        assert len(two.devices) == 2 and two.input_device == torch.device("cuda", 0)
        name, _ = choose_engine(EngineSchema(name="auto"), two, zeroth_order=True, queries=2)
        assert name == "inplace"
        tok = one.module.tokenizer
        x = torch.tensor([encode_causal(tok, "a great movie, so. It was", 32)] * 4, device="cuda:0")
        y = torch.tensor([1, 1, 0, 0], device="cuda:0")
        originals = [p.detach().cpu().clone() for p in two.params]
        stats = []
        for model in (one, two):
            method = make_method("dpzero", model, {"lr": 1e-2, "clip": 1.0, "q": 2}, sigma=1.0, b=4,
                                 engine="inplace", device=torch.device("cuda", 0))
            stats.append(host_stats(method.step(x, y, 1)))   # cuda:0 alone in float32 keeps its step on the device
        assert stats[0]["loss"] == pytest.approx(stats[1]["loss"], rel=1e-4)
        for a, b, o in zip(one.params, two.params, originals):
            assert torch.allclose(a.cpu().float(), b.cpu().float(), atol=1e-3)
        assert any(not torch.equal(b.cpu(), o) for b, o in zip(two.params, originals))
        assert two.evaluate(_Split(x, y), batch_size=4)["accuracy"] >= 0


class _Split:
    def __init__(self, x, y):
        self.x, self.y = x, y

    def __len__(self):
        return len(self.y)

    def batch(self, idx, device):
        return self.x[idx].to(device), self.y[idx].to(device)
