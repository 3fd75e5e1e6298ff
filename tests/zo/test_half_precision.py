"""Half precision that holds: the in-place engine's queries of a float16 / bfloat16 model leave the
parameters bit-identical, on the fly (each module on its perturbed weights, nothing written) or
with the exact shift (a thousand cycles), where the naive add-and-subtract drifts; both give the
same losses; and a tiny model trains in float16 as it does in float32 (losses computed in float32)."""
import numpy as np
import pytest
import torch

from conftest import typed_section
from llm_fixtures import tiny_opt_model, write_opt_and_sst2
from pazo.data.prompt_tasks import PromptTaskSchema, load_prompt_bundle
from pazo.models.functional import FunctionalModel
from pazo.pretrained import load_pretrained
from pazo.rng import RandomStreams
from pazo.zo.directions import FlatDirections, SeededDirections
from pazo.zo.engines import InPlaceEngine
from pazo.zo.half_precision import ExactShift, PerturbedForward
from pazo.zo.layout import piece_bounds


def tensors():
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(64, 32, generator=g) * 0.02).half(), torch.randn(300, generator=g).half(),
            (torch.randn(40, 8, generator=g) * 0.02).to(torch.bfloat16), torch.randn(7, generator=g) * 0.02]


@pytest.mark.parametrize("scale", [1e-3, 1e-2, 0.5])
def test_a_thousand_cycles_leave_half_precision_tensors_bit_identical(scale):
    params, naive = tensors(), tensors()
    original = [p.clone() for p in params]
    shifter = ExactShift(params)
    for i in range(1000):
        dirs = SeededDirections([p.shape for p in params], [i], dtype=torch.float16)
        shifter.shift(dirs, 0, scale if i % 2 else -scale)
        assert not torch.equal(params[0], original[0])                  # the perturbation is there
        shifter.restore()
        for p, u in zip(naive, dirs.iter_tensors(0)):                    # MeZO's +s u, then -s u
            p.add_(u.to(p.dtype), alpha=scale if i % 2 else -scale)
        for p, u in zip(naive, dirs.iter_tensors(0)):
            p.add_(u.to(p.dtype), alpha=-scale if i % 2 else scale)
    assert all(torch.equal(p, o) for p, o in zip(params[:3], original[:3]))
    assert torch.allclose(params[3], original[3], atol=1e-6)            # float32: the engine's own add/sub
    assert not all(torch.equal(p, o) for p, o in zip(naive[:3], original[:3]))  # the naive cycle drifts


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_opt_and_sst2(tmp_path_factory.mktemp("half"))


def batch(root, n=8):
    tok = load_pretrained(str(root / "opt"), "tokenizer")
    cfg = typed_section(PromptTaskSchema, {"task": "sst2", "root": str(root), "download": False,
                                           "model_kind": "hf_causal_lm", "data_seed": 13, "k_shot": None, "n_train": n,
                                           "n_val": None, "test_size": None, "max_length": 64, "label_words": None,
                                           "public_source": "none"})
    data = load_prompt_bundle(cfg, RandomStreams(0), tok)
    return data.private.batch(np.arange(n))


@pytest.mark.llm
@pytest.mark.parametrize("calls", [50, pytest.param(500, marks=pytest.mark.slow)])
def test_the_inplace_engine_leaves_a_float16_model_bit_identical(tiny, calls):
    model = tiny_opt_model(tiny, "float16")
    x, y = batch(tiny, 2)
    original = [p.detach().clone() for p in model.params]
    engine = InPlaceEngine()
    for i in range(calls):                                            # 2 queries each
        dirs = SeededDirections(model.shapes, [i], dtype=torch.float16)
        losses = engine.losses(model, x, y, dirs, [(0, 1e-3), (0, -1e-3)])
        assert losses.dtype == torch.float32 and torch.isfinite(losses).all()
    assert all(torch.equal(p, o) for p, o in zip(model.params, original))
    assert engine.half_precision_queries.startswith("on the fly") and engine.kept_peak == 0  # nothing kept
    largest = max(p.nbytes for p in model.params)
    assert largest <= engine.on_the_fly[1].temporary_peak_bytes <= 2 * largest    # one module's weights at a time


def exact_shift_losses(model, x, y, directions, points):
    """`ExactShift`'s losses, each point reached from the original parameters (its restore of a
    float32 parameter is an add and a subtract, which need not give it back exactly)."""
    original, out = [p.detach().clone() for p in model.params], []
    with torch.no_grad():
        for j, s in points:
            shifter = ExactShift(model.params)
            shifter.shift(directions, j, s)
            out.append(model.current_losses(x, y))
            shifter.restore()
            for p, o in zip(model.params, original):
                p.copy_(o)
    return torch.stack(out)


@pytest.mark.llm
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("group_numel", [None, 64])
def test_on_the_fly_queries_give_the_exact_shifts_losses_and_never_write_the_parameters(tiny, dtype, group_numel):
    """Each module's perturbed weights built as it runs (direction pieces served per parameter, in
    the forward's order: one group kept whole, or many groups redrawn from recorded states) give
    bit for bit the losses of the parameters moved to round(x + s u)."""
    model = tiny_opt_model(tiny, dtype)
    x, y = batch(tiny, 4)
    original = [p.detach().clone() for p in model.params]
    engine, points = InPlaceEngine(), [(0, 1e-3), (0, -1e-3), (1, 1e-2), (1, -1e-2)]
    for seed in range(3):
        make = lambda: SeededDirections(model.shapes, [seed, seed + 7], dtype=model.params[0].dtype,  # noqa: E731
                                        group_numel=group_numel)
        got = engine.losses(model, x, y, make(), points)
        assert torch.equal(got, exact_shift_losses(model, x, y, make(), points))
        assert all(p.data_ptr() == o.data_ptr() for p, o in zip(model.params, engine.on_the_fly[1].params))
    assert all(torch.equal(p, o) for p, o in zip(model.params, original))
    assert engine.half_precision_queries.startswith("on the fly")
    assert (len(make().groups) > 1) == (group_numel is not None)


class ReadsChildWeight(torch.nn.Module):
    """A parent that reads a child's weight directly (not through the child's forward), in one of
    several ways."""

    def __init__(self, read):
        super().__init__()
        self.embed, self.head, self.read = torch.nn.Embedding(20, 8), torch.nn.Linear(8, 3), read

    def forward(self, x):
        h, w, b = self.embed(x).mean(dim=1), self.head.weight, self.head.bias
        if self.read == "linear":
            return torch.nn.functional.linear(h, w, b)
        if self.read == "transpose":
            return h @ w.T + b
        return torch.nn.functional.linear(h, w.data, b)


@pytest.mark.parametrize("read, shown", [("linear", "head.weight by linear"), ("transpose", "head.weight by T"),
                                         ("data", "head.weight by data")])
def test_a_parameter_read_outside_its_module_falls_back_to_the_exact_shift(read, shown):
    torch.manual_seed(0)
    model = FunctionalModel(ReadsChildWeight(read).half())
    x, y = torch.randint(0, 20, (6, 5)), torch.randint(0, 3, (6,))
    make = lambda: SeededDirections(model.shapes, [3], dtype=torch.float16)  # noqa: E731
    engine = InPlaceEngine()
    got = engine.losses(model, x, y, make(), [(0, 1e-2), (0, -1e-2)])
    assert torch.equal(got, exact_shift_losses(model, x, y, make(), [(0, 1e-2), (0, -1e-2)]))
    assert engine.half_precision_queries.startswith("exact shift") and shown in engine.half_precision_queries
    assert engine.on_the_fly == (model, None)
    assert not torch.nn.modules.module._global_forward_pre_hooks and not torch.nn.modules.module._global_forward_hooks


class HalfEmbeddingFloatHead(torch.nn.Module):
    """Float16 embeddings under a float32 head: both kinds of trainable parameter in one model."""

    def __init__(self):
        super().__init__()
        self.embed, self.head = torch.nn.Embedding(20, 8).half(), torch.nn.Linear(8, 3)

    def forward(self, x):
        return self.head(self.embed(x).float().mean(dim=1))


def test_on_the_fly_queries_of_a_mixed_precision_model_give_the_exact_shifts_losses():
    """Its float32 parameters are moved as the exact shift moves them (one add), the float16 ones
    rounded once from float32."""
    torch.manual_seed(0)
    model = FunctionalModel(HalfEmbeddingFloatHead())
    x, y = torch.randint(0, 20, (6, 5)), torch.randint(0, 3, (6,))
    engine, points = InPlaceEngine(), [(0, 1e-2), (0, -1e-2), (1, 3e-3), (1, -3e-3)]
    for seed in range(20):
        make = lambda: SeededDirections(model.shapes, [seed, seed + 1], dtype=torch.float16)  # noqa: E731
        assert torch.equal(engine.losses(model, x, y, make(), points), exact_shift_losses(model, x, y, make(), points))
    assert engine.half_precision_queries.startswith("on the fly")


def test_a_forward_that_raises_leaves_the_modules_their_parameters():
    model = FunctionalModel(torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2)).half())
    forward = PerturbedForward(model.module, model.params)
    dirs = SeededDirections(model.shapes, [0], dtype=torch.float16)
    with pytest.raises(RuntimeError):
        with forward.at(dirs, 0, 1e-2):
            model.module(torch.zeros(2, 5, dtype=torch.float16))            # wrong width: raises in the first layer
    assert all(m._parameters[n] is p for (m, own) in forward.owners for n, i in own for p in [model.params[i]])
    assert not torch.nn.modules.module._global_forward_pre_hooks                  # the hooks are gone too
    lstm = torch.nn.LSTM(3, 4).half()         # its fused kernel reads cached weight lists, not _parameters
    assert PerturbedForward(lstm, list(lstm.parameters())).unsupported == "recurrent layers (LSTM)"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("group_numel", [2**20, None])
def test_a_parameters_direction_alone_is_its_slice_of_the_whole(dtype, group_numel):
    """`parameter_pieces`, asked in any order, serves the numbers of the whole direction vector."""
    shapes = BIG + [torch.Size([40, 3])]
    starts = np.cumsum([0] + [s.numel() for s in shapes])
    for distribution, radius in (("gaussian", None), ("sphere", 3.0)):
        served = SeededDirections(shapes, [5, 6], distribution, radius, dtype=dtype, group_numel=group_numel)
        whole = SeededDirections(shapes, [5, 6], distribution, radius, dtype=dtype, group_numel=group_numel)
        for j in (0, 1, 0):
            vector = whole.vector(j)
            for i in (3, 0, 4, 1, 2, 0):
                got = torch.empty(shapes[i].numel(), dtype=dtype)
                for lo, piece in served.parameter_pieces(j, i):
                    assert piece.numel() <= 2**20 + 15
                    got[lo:lo + piece.numel()] = piece
                assert torch.equal(got, vector[starts[i]:starts[i + 1]]), (distribution, j, i)
    flat = torch.randn(2, int(starts[-1]), dtype=dtype)
    held = FlatDirections(flat, lambda v: list(v.split([s.numel() for s in shapes])))
    assert torch.equal(torch.cat([t for _, t in held.parameter_pieces(1, 3)]), flat[1, starts[3]:starts[4]])


@pytest.mark.llm
@pytest.mark.slow   # float16 matmuls are slow on CPU: about 2 minutes on 2 loaded cores
def test_a_tiny_model_trains_in_float16_as_in_float32(tiny, make_method):
    x, y = batch(tiny, 8)
    curves = {}
    for dtype in ("float32", "float16"):
        model = tiny_opt_model(tiny, dtype)
        method = make_method("mezo", model, {"lr": 5e-3, "clip": 1.0, "q": 4, "smoothing": 1e-2}, engine="inplace")
        curves[dtype] = [method.step(x, y, t)["loss"] for t in range(1, 41)]
    full, half = np.array(curves["float32"]), np.array(curves["float16"])
    assert full[-5:].mean() < full[:5].mean() - 0.02                   # it trains ...
    assert half[-5:].mean() < half[:5].mean() - 0.02                   # ... in float16 too
    assert np.abs(full - half).max() < 0.02                            # along the same curve


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("numel", [7, 16, 100, 2**12 + 3, 2**12 + 15, 2**12 + 16, 2**12 + 17, 3 * 2**12])
def test_pieces_drawn_one_after_another_are_one_draw_on_cpu(dtype, numel):
    """`piece_bounds` (pieces of 2^10 here): the CPU generator gives the same numbers, and is left
    in the same state, as for one draw of the whole (torch treats a tail of under 16 apart)."""
    gen = torch.Generator().manual_seed(3)
    whole, after = torch.empty(numel, dtype=dtype).normal_(generator=gen), torch.randn(5, generator=gen)
    gen.manual_seed(3)
    pieces = torch.empty(numel, dtype=dtype)
    bounds = piece_bounds(numel, 2**10)
    for lo, hi in bounds:
        pieces[lo:hi].normal_(generator=gen)
    assert torch.equal(pieces, whole) and torch.equal(torch.randn(5, generator=gen), after)
    assert bounds[0][0] == 0 and bounds[-1][1] == numel and all(b - a >= min(16, numel) for a, b in bounds)


BIG = [torch.Size([1030, 1030]), torch.Size([300]), torch.Size([7]), torch.Size([2**20 + 5])]  # over 2^21 entries


@pytest.mark.parametrize("distribution, radius", [("gaussian", None), ("sphere", 3.0)])
def test_a_direction_of_several_groups_drawn_in_pieces_is_the_same_direction(distribution, radius):
    """Pieces of a few MB each (never a group) give exactly the vector the groups give."""
    grouped = SeededDirections(BIG, [5], distribution, radius, group_numel=2**20)
    assert len(grouped.groups) == 3
    expected = grouped.vector(0)
    pieced = SeededDirections(BIG, [5], distribution, radius, group_numel=2**20)
    pieces = list(pieced.iter_pieces(0))
    assert max(u.numel() for _, _, u in pieces) <= 2**20 + 15 and len(pieces) > len(BIG)
    assert [(i, lo) for i, lo, _ in pieces] == [(0, 0), (0, 2**20), (1, 0), (2, 0), (3, 0)]
    assert torch.equal(torch.cat([u for _, _, u in pieces]), expected)


@pytest.mark.parametrize("scale", [1e-3, 1e-2])
def test_the_exact_shift_in_pieces_moves_to_round_x_plus_su_and_back(scale):
    """A model of over 2^21 entries in float16, shifted a piece at a time: the parameters become
    exactly round(x + s u) (computed whole, in float32) and come back bit-identical."""
    g = torch.Generator().manual_seed(0)
    params = [(torch.randn(shape, generator=g) * 0.02).half() for shape in BIG]
    original = [p.clone() for p in params]
    shifter = ExactShift(params)
    for i in range(3):
        dirs = SeededDirections(BIG, [i], dtype=torch.float16, group_numel=2**20)
        u = SeededDirections(BIG, [i], dtype=torch.float16, group_numel=2**20).tensors(0)
        shifter.shift(dirs, 0, scale)
        assert all(torch.equal(p, (o.float() + scale * v.float()).half()) for p, o, v in zip(params, original, u))
        shifter.restore()
        assert all(torch.equal(p, o) for p, o in zip(params, original))
    assert 0 < shifter.kept_peak < shifter.kept_entries                 # the most held at once, of 3 shifts
    assert shifter.kept_peak_bytes == 6 * shifter.kept_peak              # an int32 index and a float16 value


def test_the_exact_shift_restores_a_non_contiguous_parameter():
    g = torch.Generator().manual_seed(1)
    params = [(torch.randn(40, 30, generator=g) * 0.02).half().t(), (torch.randn(50, generator=g) * 0.02).half()]
    assert not params[0].is_contiguous()
    original = [p.clone() for p in params]
    shifter = ExactShift(params)
    dirs = SeededDirections([p.shape for p in params], [4], dtype=torch.float16)
    shifter.shift(dirs, 0, 1e-2)
    u = dirs.tensors(0)
    assert torch.equal(params[0], (original[0].float() + 1e-2 * u[0].float()).half())
    shifter.restore()
    assert shifter.kept_entries > 0 and all(torch.equal(p, o) for p, o in zip(params, original))
