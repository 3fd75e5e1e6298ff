"""The vectorised and in-place engines give the same losses and the same updates."""
import math
from types import SimpleNamespace

import pytest
import torch
from hypothesis import example, given, settings, strategies as st
from torch import nn

from conftest import quadratic_model
from pazo.data.base import TensorSplit
from pazo.errors import ConfigError
from pazo.methods.base import public_grads_batched
from pazo.models import FunctionalModel
from pazo.models.small_cnn import SmallCNN
from pazo.zo.directions import FlatDirections, SeededDirections, SubspaceDirections
from pazo.zo.engines import InPlaceEngine, VectorisedEngine, apply_flat_update, shift


def small_cnn(dropout=0.0):
    torch.manual_seed(0)
    return FunctionalModel(SmallCNN(1, 10, 8, width=4, dropout=dropout))


def direction_sets(model):
    g = torch.Generator().manual_seed(0)
    basis = torch.linalg.qr(torch.randn(model.dim, 2, generator=g))[0].T.contiguous()
    return {
        "gaussian": SeededDirections(model.shapes, [1, 2, 3]),
        # drawn a few parameters at a time (as for a model of more than 2^22 parameters), never kept
        "gaussian_groups": SeededDirections(model.shapes, [1, 2, 3], group_numel=100),
        "sphere_groups": SeededDirections(model.shapes, [4, 5], "sphere", radius=model.dim ** 0.25, group_numel=100),
        "sphere": SeededDirections(model.shapes, [4, 5], "sphere", radius=model.dim ** 0.25),
        "subspace": SubspaceDirections(basis, torch.randn(3, 2, generator=g), model.split_flat),
        "flat": FlatDirections(torch.randn(2, model.dim, generator=g), model.split_flat),
    }


@pytest.mark.parametrize("kind", ["gaussian", "gaussian_groups", "sphere", "sphere_groups", "subspace", "flat"])
def test_engines_agree_and_inplace_restores_parameters(kind):
    model = small_cnn()
    dirs = direction_sets(model)[kind]
    x, y = torch.rand(6, 1, 8, 8), torch.randint(0, 10, (6,))
    points = [(j, s) for j in range(dirs.count) for s in (1e-2, -1e-2)]
    before = model.flat_params().clone()
    vec = VectorisedEngine().losses(model, x, y, dirs, points)
    chunked = VectorisedEngine(chunk_size=3).losses(model, x, y, dirs, points)
    inplace = InPlaceEngine().losses(model, x, y, dirs, points)
    rows = InPlaceEngine().loss_rows(model, x, y, dirs, points)   # what the two-point step reads
    assert vec.shape == (len(points), 6) and [row.shape for row in rows] == [(6,)] * len(points)
    assert torch.allclose(vec, inplace, atol=1e-5) and torch.allclose(vec, chunked, atol=1e-6)
    assert torch.allclose(vec, torch.stack(rows), atol=1e-5)
    assert torch.allclose(model.flat_params(), before, atol=1e-6)
    # and the perturbations really move the loss (a no-op engine would pass the checks above)
    assert (vec[0] - vec[1]).abs().max() > 1e-6


def test_directions_are_regenerated_identically():
    model = small_cnn()
    dirs = SeededDirections(model.shapes, [7], "sphere", radius=3.0)
    first, again = dirs.tensors(0), dirs.tensors(0)
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert torch.cat([t.reshape(-1) for t in first]).norm().item() == pytest.approx(3.0, rel=1e-5)


@pytest.mark.parametrize("group_numel", [None, 1, 100])
def test_seeded_directions_are_per_parameter_randn_on_cpu(group_numel):
    """Same seed, same numbers as drawing torch.randn(shape) per parameter in order (how every
    earlier version drew them, and what the recorded golden runs used), whatever the grouping."""
    model = small_cnn()
    dirs = SeededDirections(model.shapes, [11, 12], group_numel=group_numel)
    assert len(dirs.groups) == (1 if group_numel is None else len(dirs.groups))
    if group_numel == 1:
        assert len(dirs.groups) == len(model.shapes)
    for j, seed in enumerate([11, 12]):
        gen = torch.Generator().manual_seed(seed)
        legacy = [torch.randn(shape, generator=gen) for shape in model.shapes]
        assert all(torch.equal(a, b) for a, b in zip(dirs.tensors(j), legacy))
        assert torch.equal(dirs.vector(j), torch.cat([t.reshape(-1) for t in legacy]))


@pytest.mark.parametrize("shapes", [[(16, 1, 3, 3), (16,), (32, 16, 3, 3), (32,), (10, 512), (10,)],
                                    [(3,), (48,), (17,), (16,), (5, 5), (64,), (7,), (2 ** 20 - 16,), (32,)]])
def test_joined_cpu_draws_give_per_parameter_randn(shapes):
    """`cpu_draws` joins whole parameters into fewer draws only where that draws the same numbers."""
    from pazo.zo.layout import cpu_draws
    numels = [math.prod(s) for s in shapes]
    draws = cpu_draws(numels)
    assert draws[0][0] == 0 and draws[-1][1] == sum(numels) and len(draws) < len(shapes)
    dirs = SeededDirections(shapes, [9])
    gen = torch.Generator().manual_seed(9)
    assert all(torch.equal(a, torch.randn(s, generator=gen)) for a, s in zip(dirs.tensors(0), shapes))


def test_packed_parameters_are_views_of_one_buffer_until_moved():
    """A model's parameters are views of one flat buffer (one add moves them all); once they
    are moved elsewhere (here `module.double()`) the buffer is dropped and steps go per parameter."""
    model = small_cnn()
    packed = model.packed()
    assert packed is not None and packed.shape == (model.dim,)
    assert torch.equal(packed, torch.cat([p.detach().reshape(-1) for p in model.params]))
    dirs = SeededDirections(model.shapes, [3])
    before = packed.clone()
    with torch.no_grad():
        shift(model, dirs, 0, 0.5)
    assert torch.equal(packed, before + 0.5 * dirs.vector(0))
    assert torch.equal(model.params[0].detach().reshape(-1), packed[:model.numels[0]])
    x = torch.rand(4, 1, 8, 8)
    loss = model.current_losses(x, torch.zeros(4, dtype=torch.long)).sum()
    apply_flat_update(model, torch.ones(model.dim), lr=0.1)     # one add on the buffer ...
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()                                         # ... that autograd still sees
    loss = model.current_losses(x, torch.zeros(4, dtype=torch.long)).sum()
    InPlaceEngine().losses(model, x, torch.zeros(4, dtype=torch.long), dirs, [(0, 0.1), (0, -0.1)])
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()                     # queries move the buffer too (bumped once, at the restore)
    model.module.double()                                       # new storage for every parameter
    assert model.packed() is None
    moved = [p.detach().clone() for p in model.params]
    with torch.no_grad():
        shift(model, SeededDirections(model.shapes, [3], dtype=torch.float64), 0, 1.0)
    assert all(not torch.equal(p, m) for p, m in zip(model.params, moved))   # still moved, one by one
    assert SeededDirections([[2, 3], [4]], [1]).numels == [6, 4]              # shapes as lists too
    assert FunctionalModel(small_cnn().module.half()).packed() is None          # float16: left alone


def test_a_large_model_is_packed_and_moved_a_group_of_its_direction_at_a_time(monkeypatch):
    """A model of over 2^22 entries is packed too (its direction drawn a group at a time, each
    group one add on the packed buffer): the same parameters as the per-parameter adds."""
    torch.manual_seed(0)
    big = FunctionalModel(nn.Sequential(nn.Linear(2 ** 11, 2 ** 10), nn.Linear(2 ** 10, 2 ** 11 + 3)))
    assert big.dim > 2 ** 22 and big.packed() is not None
    values = [p.detach().clone() for p in big.params]
    for distribution, radius in (("gaussian", None), ("sphere", 7.0)):
        dirs = SeededDirections(big.shapes, [5], distribution, radius=radius, group_numel=2 ** 20)
        assert len(dirs.groups) > 1 and dirs.flat(0) is None
        with torch.no_grad(), monkeypatch.context() as m:
            m.setattr(torch, "_foreach_add_", None)      # not the per-parameter path
            shift(big, dirs, 0, 0.25)
        expected = [v + 0.25 * u for v, u in zip(values, dirs.tensors(0))]
        if radius is not None:                           # its norm summed over the groups' draws
            norm = torch.cat([u.reshape(-1) for u in dirs.tensors(0)]).double().norm()
            assert abs(float(norm) - radius) < 1e-4
        assert all(torch.equal(p, e) for p, e in zip(big.params, expected))
        assert torch.equal(big.packed(), torch.cat([e.reshape(-1) for e in expected]))
        values = expected


def test_parameter_groups_partition_consecutive_runs():
    from pazo.zo.layout import parameter_groups
    assert parameter_groups([3, 4, 5, 20, 1], 8) == [(0, 2), (2, 3), (3, 4), (4, 5)]
    assert parameter_groups([3, 4, 5], None) == [(0, 3)]
    groups = parameter_groups([2 ** 22] * 20)  # d / 16 per group at most, one big parameter each
    assert groups == [(i, i + 1) for i in range(20)]


def test_inplace_update_equals_explicit_sum():
    from pazo.zo.engines import apply_directional_update
    model = small_cnn()
    before = model.flat_params().clone()
    dirs = SeededDirections(model.shapes, [1, 2, 3], group_numel=300)
    apply_directional_update(model, dirs, [0.5, 0.0, -2.0], lr=0.1)
    want = before - 0.1 * (0.5 * dirs.vector(0) - 2.0 * dirs.vector(2))
    assert torch.allclose(model.flat_params(), want, atol=1e-6)


def test_empty_poisson_batch_gives_empty_losses():
    model = small_cnn()
    dirs = SeededDirections(model.shapes, [1])
    for engine in (VectorisedEngine(), InPlaceEngine()):
        out = engine.losses(model, torch.zeros(0, 1, 8, 8), torch.zeros(0, dtype=torch.long), dirs,
                            [(0, 0.1), (0, -0.1)])
        assert out.shape == (2, 0)
        rows = engine.loss_rows(model, torch.zeros(0, 1, 8, 8), torch.zeros(0, dtype=torch.long), dirs,
                                [(0, 0.1), (0, -0.1)])
        assert [row.shape for row in rows] == [(0,), (0,)]


@pytest.mark.parametrize("engine", ["vectorised", "inplace"])
@pytest.mark.parametrize("q", [1, 2])
def test_an_empty_batch_of_token_ids_takes_the_noise_only_step(engine, q, make_method):
    """An empty Poisson batch of integer token ids: the losses are empty rows of the parameters'
    dtype (not the batch's), so the step releases noise only and moves the parameters by it (a
    step on integer losses raised, and with q > 1 rounded the noise-only coefficients to integers,
    0 here, so the parameters did not move)."""
    from pazo.models.lstm import LSTMClassifier
    torch.manual_seed(0)
    model = FunctionalModel(LSTMClassifier(14, embed=8, hidden=6, dropout=0.0))
    method = make_method("dpzero", model, {"lr": 0.1, "clip": 1.0, "q": q}, sigma=1.0, b=8, engine=engine)
    before = model.flat_params().clone()
    stats = method.step(torch.zeros(0, 7, dtype=torch.long), torch.zeros(0, dtype=torch.long), 1)
    assert math.isnan(stats["loss"]) and stats["projected_grad"] > 0
    assert not torch.equal(model.flat_params(), before)
    for rows in (InPlaceEngine().loss_rows(model, torch.zeros(0, 7, dtype=torch.long), None,
                                           SeededDirections(model.shapes, [1]), [(0, 0.1), (0, -0.1)]),
                 VectorisedEngine().losses(model, torch.zeros(0, 7, dtype=torch.long), None,
                                           SeededDirections(model.shapes, [1]), [(0, 0.1), (0, -0.1)])):
        assert [(row.shape, row.dtype) for row in rows] == [((0,), torch.float32)] * 2


def test_dropout_queries_off_by_default_and_same_masks_when_on():
    model = small_cnn(dropout=0.5)
    model.module.train()
    dirs = SeededDirections(model.shapes, [1])
    x, y = torch.rand(6, 1, 8, 8), torch.randint(0, 10, (6,))
    eval_losses = InPlaceEngine().losses(model, x, y, dirs, [(0, 0.0), (0, 0.0)])
    assert torch.equal(eval_losses[0], eval_losses[1]) and model.module.training
    for engine in (InPlaceEngine(), VectorisedEngine()):
        train = engine.losses(model, x, y, dirs, [(0, 0.0), (0, 0.0)], train=True, seed=3)
        assert torch.equal(train[0], train[1])  # same masks for both evaluations
        assert not torch.allclose(train[0], eval_losses[0])  # but dropout was active


def test_train_mode_matters_only_for_mode_dependent_layers():
    from torch import nn

    from pazo.models.functional import train_mode_matters

    class Custom(nn.Module):  # an unknown class may read self.training
        def forward(self, x):
            return x
    assert not train_mode_matters(SmallCNN(1, 10, 8, width=4, dropout=0.0))
    assert train_mode_matters(SmallCNN(1, 10, 8, width=4, dropout=0.1))
    assert train_mode_matters(nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3)))
    assert train_mode_matters(nn.Sequential(nn.Linear(3, 3), Custom()))
    assert not train_mode_matters(nn.Sequential(nn.Linear(3, 3), nn.ReLU(), nn.Dropout(0.0)))


def test_queries_leave_a_mode_free_model_alone_and_switch_a_mode_dependent_one():
    """The switch to eval mode is skipped only where it cannot change the losses; where it is made,
    every submodule runs the query in eval mode and is back in train mode after."""
    x, y = torch.rand(4, 1, 8, 8), torch.randint(0, 10, (4,))
    for dropout, query_mode in ((0.0, True), (0.5, False)):
        model = small_cnn(dropout=dropout)
        model.module.train()
        seen = []
        model.module.register_forward_pre_hook(lambda m, args: seen.append({s.training for s in m.modules()}))
        InPlaceEngine().losses(model, x, y, SeededDirections(model.shapes, [1]), [(0, 0.1)])
        assert seen == [{query_mode}]
        assert all(m.training for m in model.module.modules())


def test_set_training_sets_every_flag_and_defers_to_a_train_of_its_own(monkeypatch):
    """`FunctionalModel.set_training` writes the flags module.train() would; a class whose train()
    does more is called (here one that also counts), as is transformers' with hub kernels on."""
    from transformers import RobertaConfig, RobertaForSequenceClassification

    model = small_cnn(dropout=0.5)
    with monkeypatch.context() as patch:
        patch.setattr(nn.Module, "train", None)      # the flags alone, no train() walk
        for mode in (False, True, False):
            model.set_training(mode)
            assert {m.training for m in model.module.modules()} == {mode}

    class Counting(nn.Sequential):
        calls = []

        def train(self, mode=True):
            Counting.calls.append(mode)
            return super().train(mode)

    own = FunctionalModel(nn.Sequential(nn.Linear(3, 3), Counting(nn.Dropout(0.5), nn.Linear(3, 2))))
    own.set_training(False)
    assert Counting.calls == [False] and not any(m.training for m in own.module.modules())
    config = RobertaConfig(vocab_size=40, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                           intermediate_size=32, max_position_embeddings=20, num_labels=2)
    hf = FunctionalModel(RobertaForSequenceClassification(config))
    assert hf._flag_only_modes is not None           # transformers' train() with kernels off: flags
    hf.set_training(False)
    assert not any(m.training for m in hf.module.modules())
    calls = []
    hf.module.train = lambda mode=True: calls.append(mode)   # what set_training must now call
    monkeypatch.setattr(type(hf.module), "use_kernels", True)   # a property of transformers' models
    hf.set_training(True)
    assert calls == [True]


METHOD_CFGS = {
    "dpzero": {"q": 2, "smoothing": 1e-2, "direction": "gaussian", "radius": "sqrt_d"},
    "pazo_m": {"q": 2, "smoothing": 1e-2, "direction": "sphere", "radius": "fourth_root_d",
               "alpha": 0.5, "public_batch_size": 4},
    "pazo_p": {"q": 2, "smoothing": 1e-2, "k": 3, "public_batch_size": 4, "coef_distribution": "sphere"},
    "pazo_p_prime": {"q": 2, "smoothing": 1e-2, "k": 3, "public_batch_size": 4,
                     "coef_distribution": "gaussian"},
    "pazo_s": {"k": 3, "public_batch_size": 4, "perturbation": 1e-2, "noisy_candidate": True},
}


@pytest.mark.parametrize("name", sorted(METHOD_CFGS))
def test_methods_take_the_same_steps_with_either_engine(name, make_method):
    results = []
    for engine in ("vectorised", "inplace"):
        model = small_cnn()
        public = TensorSplit(torch.rand(20, 1, 8, 8), torch.randint(0, 10, (20,)))
        method = make_method(name, model, {"lr": 0.1, "clip": 1.0, **METHOD_CFGS[name]}, sigma=1.0, b=6,
                             public=public, engine=engine, seed=3)
        gen = torch.Generator().manual_seed(9)
        for step in range(3):
            method.step(torch.rand(6, 1, 8, 8, generator=gen), torch.randint(0, 10, (6,), generator=gen), step)
        results.append(model.flat_params())
    assert not torch.allclose(results[0], small_cnn().flat_params())
    assert torch.allclose(results[0], results[1], atol=1e-5)


def test_quadratic_model_under_both_engines_in_float64():
    model = quadratic_model(d=5)
    dirs = SeededDirections(model.shapes, [1, 2], dtype=torch.float64)
    x = torch.randn(3, 5, dtype=torch.float64)
    pts = [(0, 0.1), (0, -0.1), (1, 0.1), (1, -0.1)]
    a = VectorisedEngine().losses(model, x, torch.zeros(3), dirs, pts)
    b = InPlaceEngine().losses(model, x, torch.zeros(3), dirs, pts)
    assert torch.allclose(a, b, atol=1e-12)


def test_public_gradients_together_equal_one_by_one():
    model = small_cnn()
    gen = torch.Generator().manual_seed(1)
    batches = [(torch.rand(5, 1, 8, 8, generator=gen), torch.randint(0, 10, (5,), generator=gen)) for _ in range(3)]
    together = model.mean_loss_grads(batches, batched=True)
    assert model.grads_together(batches, batched=True) and not model.own_group_grads
    assert together.shape == (3, model.dim)
    one_by_one = torch.stack([model.mean_loss_grad(x, y) for x, y in batches])
    assert torch.allclose(together, one_by_one, atol=1e-6)
    assert not torch.allclose(together[0], together[1])


def public_images(n=40, seed=3):
    gen = torch.Generator().manual_seed(seed)
    return TensorSplit(torch.rand(n, 1, 8, 8, generator=gen), torch.randint(0, 10, (n,), generator=gen))


def test_public_gradients_together_by_default_on_cuda_only(monkeypatch):
    """`method.public_grads_together=auto` follows `grads_together_by_default`: one pass over the k
    batches on CUDA, the LSTM's too (measured faster there); one by one on CPU (measured no faster
    there, and slower for the LSTM)."""
    from pazo.models.lstm import LSTMClassifier
    cnn = small_cnn()
    lstm = FunctionalModel(LSTMClassifier(14, embed=8, hidden=6, dropout=0.0))
    auto, true, false = (SimpleNamespace(public_grads_together=v) for v in ("auto", True, False))
    assert not cnn.grads_together_by_default and not lstm.grads_together_by_default
    assert [public_grads_batched(c, cnn) for c in (auto, true, false)] == [False, True, False]
    monkeypatch.setattr(FunctionalModel, "device", property(lambda self: torch.device("cuda", 0)))
    assert cnn.grads_together_by_default and lstm.grads_together_by_default
    assert [public_grads_batched(c, cnn) for c in (auto, true, false)] == [True, True, False]
    assert [public_grads_batched(c, lstm) for c in (auto, true, false)] == [True, True, False]


@pytest.mark.parametrize("name", ["pazo_p", "pazo_s"])
def test_public_gradients_taken_as_asked(name, make_method, monkeypatch):
    """`method.public_grads_together`: true, the k public gradients of a step in one vmapped pass;
    false, one batch at a time; auto (the default), on CPU, one at a time; from the same public
    batches, equal either way."""
    cfg = {"lr": 0.1, "clip": 1.0, "k": 3, "public_batch_size": 5}
    default = make_method(name, small_cnn(), cfg, public=public_images())
    together = make_method(name, small_cnn(), {**cfg, "public_grads_together": True}, public=public_images())
    apart = make_method(name, small_cnn(), {**cfg, "public_grads_together": False}, public=public_images())
    assert default.cfg.public_grads_together == "auto"
    asked = []
    mean_loss_grads = FunctionalModel.mean_loss_grads

    def spy(model, batches, batched=None):
        asked.append(model.grads_together(batches, batched))
        return mean_loss_grads(model, batches, batched)
    monkeypatch.setattr(FunctionalModel, "mean_loss_grads", spy)
    a, b, c = (m.public_grads(m.public, 3) for m in (together, apart, default))
    assert asked == [True, False, False]
    assert a.shape == b.shape == (3, together.model.dim)
    assert torch.allclose(a, b, atol=1e-6) and torch.equal(b, c) and not torch.allclose(a[0], a[1])


def test_public_gradients_together_out_of_memory_is_one_line_naming_the_switch(make_method, monkeypatch):
    """Out of memory in the vmapped pass over the k public batches (on a GPU: k batches'
    activations at once) ends in one user error that names method.public_grads_together; taken
    one after another the same step goes through."""
    cfg = {"lr": 0.1, "clip": 1.0, "k": 4, "public_batch_size": 5}
    mean_loss_grads = FunctionalModel.mean_loss_grads

    def short_of_memory(model, batches, batched=None):
        if model.grads_together(batches, batched):
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
        return mean_loss_grads(model, batches, batched)
    monkeypatch.setattr(FunctionalModel, "mean_loss_grads", short_of_memory)
    method = make_method("pazo_p", small_cnn(), {**cfg, "public_grads_together": True}, public=public_images())
    with pytest.raises(ConfigError) as err:
        method.public_grads(method.public, 4)
    assert str(err.value) == ("the 4 public gradients taken together (one vmapped pass over 4 batches of 5) ran out "
                              "of memory on cpu: set method.public_grads_together=false to take them one after "
                              "another (one batch's activations at a time)")
    apart = make_method("pazo_p", small_cnn(), {**cfg, "public_grads_together": False}, public=public_images())
    assert apart.public_grads(apart.public, 4).shape == (4, apart.model.dim)

    def always_short(model, batches, batched=None):
        raise torch.OutOfMemoryError("CUDA out of memory")
    monkeypatch.setattr(FunctionalModel, "mean_loss_grads", always_short)
    with pytest.raises(torch.OutOfMemoryError):   # one after another already: nothing to switch, the error as it is
        apart.public_grads(apart.public, 4)
    from pazo.methods.pazo_s import PazoSConfig
    with pytest.raises(ConfigError, match="public_grads_together must be auto, true or false, got 'no'"):
        PazoSConfig(name="pazo_s", lr=0.1, clip=1.0, public_grads_together="no")


def test_lstm_public_gradients_together_come_from_one_fused_pass_equal_to_one_by_one(monkeypatch):
    """The LSTM's k public gradients, one by one by default; taken together (asked), one forward and
    backward of the fused kernel over the k batches (`grads_of_group_sums`), never the vmap-friendly
    loop; the same gradients."""
    from pazo.models.lstm import LSTMClassifier, LSTMLayer
    torch.manual_seed(0)
    model = FunctionalModel(LSTMClassifier(14, embed=8, hidden=6, dropout=0.0).double())
    gen = torch.Generator().manual_seed(2)
    batches = [(torch.randint(0, 14, (4, 7), generator=gen), torch.randint(0, 2, (4,), generator=gen))
               for _ in range(3)]
    one_by_one = model.mean_loss_grads(batches)
    assert not model.grads_together(batches) and model.grads_together(batches, batched=True)
    lstm_calls = []
    real = torch.lstm
    monkeypatch.setattr(torch, "lstm", lambda *a: lstm_calls.append(1) or real(*a))
    monkeypatch.setattr(LSTMLayer, "forward", lambda *a: pytest.fail("the loop was taken"))
    together = model.mean_loss_grads(batches, batched=True)
    assert model.own_group_grads
    assert len(lstm_calls) == 2  # one per layer, for all three batches
    assert torch.allclose(together, one_by_one, atol=1e-12) and not torch.allclose(together[0], together[1])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_loss_rows_on_cuda_reach_the_host_as_the_same_lists_as_on_the_cpu():
    """`host_lists` joins accelerator rows before the one copy: the same numbers, row by row."""
    from pazo.methods.two_point import host_lists
    gen = torch.Generator().manual_seed(0)
    rows = [torch.rand(37, generator=gen) * 10 ** k for k in range(-3, 3)]
    on_cpu = host_lists(rows)
    assert host_lists([row.cuda() for row in rows]) == on_cpu
    assert [len(row) for row in on_cpu] == [37] * 6 and on_cpu[2] == rows[2].tolist()


@pytest.fixture(scope="module")
def tiny_opt(tmp_path_factory):
    """The tiny OPT (`tests/llm_fixtures.py`) and 24 random right-padded prompts of 11 tokens, labels 0/1."""
    from llm_fixtures import tiny_opt_model, write_opt_and_sst2

    model = tiny_opt_model(write_opt_and_sst2(tmp_path_factory.mktemp("alone")))
    g = torch.Generator().manual_seed(0)
    x = torch.randint(4, 400, (24, 11), generator=g)
    for i, length in enumerate(torch.randint(3, 12, (24,), generator=g).tolist()):
        x[i, length:] = model.module.pad_id
    return model, x, torch.randint(0, 2, (24,), generator=g)


def _query_losses(model, engine: str, x, y) -> torch.Tensor:
    """The [4, B] losses of two directions' two-point queries, by `engine`, the parameters put back
    exactly after (the in-place engine's restore leaves them within rounding)."""
    directions = SeededDirections(model.shapes, [7, 8])
    points = [(j, s) for j in range(2) for s in (1e-3, -1e-3)]
    saved = [p.detach().clone() for p in model.params]
    try:
        return (VectorisedEngine() if engine == "vectorised" else InPlaceEngine()).losses(model, x, y, directions,
                                                                                          points)
    finally:
        with torch.no_grad():
            for p, s in zip(model.params, saved):
                p.copy_(s)


_WHOLE: dict = {}


def _whole_batch(tiny_opt, engine: str) -> torch.Tensor:
    """`_query_losses` of the whole batch, once per engine."""
    if engine not in _WHOLE:
        _WHOLE[engine] = _query_losses(*tiny_opt[:1], engine, *tiny_opt[1:])
    return _WHOLE[engine]


@pytest.mark.llm
@settings(deadline=None, max_examples=12)
@given(st.sampled_from(["inplace", "vectorised"]), st.lists(st.integers(0, 23), min_size=1, max_size=8, unique=True))
@example("inplace", [5])      # alone: a data-parallel rank's shard of one example
@example("inplace", [3, 17, 9])
def test_an_examples_query_losses_are_the_same_bits_in_any_batch(tiny_opt, engine, subset):
    """An example's losses at the queries do not depend on the other examples of its batch, nor on
    how many there are (one alone included): a data-parallel rank evaluates its shard, one process
    the whole batch, and they must agree to the bit (DP-AggZO on the tiny OPT, 2 processes against
    1, differed by a few ulps where a Poisson batch of 2 or 3 left a rank one example)."""
    model, x, y = tiny_opt
    subset = sorted(subset)
    assert torch.equal(_query_losses(model, engine, x[subset], y[subset]), _whole_batch(tiny_opt, engine)[:, subset])


@pytest.mark.llm
@pytest.mark.parametrize("engine", ["inplace", "vectorised"])
def test_every_example_alone_has_its_query_losses_in_the_whole_batch(tiny_opt, engine):
    model, x, y = tiny_opt
    whole = _whole_batch(tiny_opt, engine)
    alone = torch.cat([_query_losses(model, engine, x[i:i + 1], y[i:i + 1]) for i in range(len(x))], dim=1)
    assert torch.equal(alone, whole), f"{int((alone != whole).sum())} of {whole.numel()} losses differ"


@settings(deadline=None, max_examples=10)
@given(st.integers(0, 3), st.integers(0, 3))
@example(0, 2)   # a data-parallel rank's empty shard against the other rank's two examples
def test_the_in_place_queries_leave_the_parameters_where_any_batch_would(first, second):
    """The in-place engine moves the parameters to each query point and back, which leaves them within
    rounding of where they were; where exactly must not depend on the batch, an empty one included, or
    a rank whose shard is empty ends its step a few ulps from the others (DP-AggZO on the tiny OPT at
    batches of 2 expected: the ranks' parameters differed)."""
    def after(n: int) -> torch.Tensor:
        model = small_cnn()
        g = torch.Generator().manual_seed(n)
        points = [(j, s) for j in range(3) for s in (1e-2, -1e-2)]
        InPlaceEngine().loss_rows(model, torch.rand(n, 1, 8, 8, generator=g), torch.randint(0, 10, (n,), generator=g),
                                  SeededDirections(model.shapes, [1, 2, 3]), points)
        return model.flat_params()
    assert torch.equal(after(first), after(second))
