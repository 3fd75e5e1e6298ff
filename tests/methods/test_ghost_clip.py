"""The book-keeping (ghost) engine gives the per-example engine's clipped sum: on every covered layer
kind over random shapes and clip bounds (with and without DOPE-SGD's shift), with parameters left to
the per-example engine (uncovered layers, a layer used twice, a tied weight, an in-place change of a
layer's output), and on the paper-setting models through a whole noisy DP-SGD step (ViT's cls_token
and pos_embed and NF-ResNet's standardised convolutions by their own rules; the fused LSTM by the
per-example engine)."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from pazo.data.base import TensorSplit
from pazo.errors import ConfigError
from pazo.methods.ghost_clip import GhostClipper
from pazo.methods.per_example import clipped_sum
from pazo.models import FunctionalModel

F64 = torch.float64


def compare(module, x, y, bound, shift_scale=0.0, chunk=3, seed=0):
    """Max |ghost - per-example| over the clipped sum and the loss sum, and the sum's size."""
    model = FunctionalModel(module.to(F64))
    shift = None
    if shift_scale:
        shift = torch.randn(model.dim, generator=torch.Generator().manual_seed(seed), dtype=F64) * shift_scale
    want, want_loss, _ = clipped_sum(model, x, y, chunk, bound, shift)
    ghost = GhostClipper(model, chunk)
    got, got_loss, _ = ghost(x, y, bound, shift)
    return float((want - got).abs().max()), float((want_loss - got_loss).abs()), float(want.norm()), ghost


class Tokens(nn.Module):
    """Embedding (with padding) -> LayerNorm -> Linear over positions -> mean -> Linear."""

    def __init__(self, vocab, width, hidden, classes, affine_bias=True):
        super().__init__()
        self.emb = nn.Embedding(vocab, width, padding_idx=0)
        self.norm = nn.LayerNorm(width, bias=affine_bias)
        self.mix = nn.Linear(width, hidden)
        self.head = nn.Linear(hidden, classes, bias=False)

    def forward(self, x):
        return self.head(torch.tanh(self.mix(self.norm(self.emb(x)))).mean(1))


class Images(nn.Module):
    """Conv2d (any stride, padding, dilation) -> GroupNorm -> Linear."""

    def __init__(self, cin, cout, kernel, stride, padding, dilation, groups, size, classes):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, kernel, stride=stride, padding=padding, dilation=dilation)
        self.norm = nn.GroupNorm(groups, cout)
        with torch.no_grad():
            out = self.conv(torch.zeros(1, cin, size, size))
        self.head = nn.Linear(out[0].numel(), classes)

    def forward(self, x):
        return self.head(torch.relu(self.norm(self.conv(x))).flatten(1))


class Attention(nn.Module):
    """One self-attention block as timm's ViT writes it (qkv and proj Linears, LayerNorm)."""

    def __init__(self, width, heads, classes):
        super().__init__()
        self.heads = heads
        self.norm = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.norm(x)).reshape(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        att = (q @ k.transpose(-2, -1) / (c // self.heads) ** 0.5).softmax(-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, c))
        return self.head(x.mean(1))


bounds = st.floats(0.01, 5.0)
batches = st.integers(1, 6)


@settings(max_examples=15, deadline=None)
@given(n=batches, length=st.integers(1, 7), vocab=st.integers(3, 12), width=st.integers(1, 6),
       hidden=st.integers(1, 5), bound=bounds, shift=st.sampled_from([0.0, 0.1]), bias=st.booleans(),
       seed=st.integers(0, 2**16))
def test_tokens_embedding_layer_norm_and_sequence_linear(n, length, vocab, width, hidden, bound, shift, bias, seed):
    """Repeated token ids, the padding id, and both sides of the Gram rule (T^2 against p d)."""
    torch.manual_seed(seed)
    x = torch.randint(0, vocab, (n, length))
    y = torch.randint(0, 3, (n,))
    err, loss_err, size, ghost = compare(Tokens(vocab, width, hidden, 3, bias), x, y, bound, shift, seed=seed)
    assert ghost.fallback_names == []
    assert err <= 1e-12 * max(size, 1) and loss_err <= 1e-12 * n


@settings(max_examples=15, deadline=None)
@given(n=batches, cin=st.integers(1, 3), cout_groups=st.sampled_from([(2, 1), (4, 2), (6, 3)]),
       kernel=st.integers(1, 3), stride=st.integers(1, 2), padding=st.integers(0, 2), dilation=st.integers(1, 2),
       bound=bounds, shift=st.sampled_from([0.0, 0.1]), seed=st.integers(0, 2**16))
def test_conv2d_and_group_norm(n, cin, cout_groups, kernel, stride, padding, dilation, bound, shift, seed):
    torch.manual_seed(seed)
    cout, groups = cout_groups
    module = Images(cin, cout, kernel, stride, padding, dilation, groups, 7, 4)
    x, y = torch.randn(n, cin, 7, 7, dtype=F64), torch.randint(0, 4, (n,))
    err, _, size, ghost = compare(module, x, y, bound, shift, seed=seed)
    assert ghost.fallback_names == []
    assert err <= 1e-12 * max(size, 1)


class StandardisedImages(nn.Module):
    """timm's ScaledStdConv2d (NF-ResNet's convolution) -> Linear."""

    def __init__(self, cin, cout, kernel, stride, padding, bias, size, classes):
        from timm.layers import ScaledStdConv2d

        super().__init__()
        self.conv = ScaledStdConv2d(cin, cout, kernel, stride=stride, padding=padding, bias=bias)
        with torch.no_grad():
            self.conv.gain.uniform_(0.5, 2.0)
            out = self.conv(torch.zeros(1, cin, size, size))
        self.head = nn.Linear(out[0].numel(), classes)

    def forward(self, x):
        return self.head(torch.relu(self.conv(x)).flatten(1))


@settings(max_examples=15, deadline=None)
@given(n=batches, cin=st.integers(2, 3), cout=st.integers(1, 16), kernel=st.integers(1, 3),
       stride=st.integers(1, 2), padding=st.integers(0, 1), bias=st.booleans(), size=st.sampled_from([3, 4, 9]),
       bound=bounds, shift=st.sampled_from([0.0, 0.1]), seed=st.integers(0, 2**16))
def test_weight_standardised_conv2d(n, cin, cout, kernel, stride, padding, bias, size, bound, shift, seed):
    """Every way to its norms: the Gram trick less the standardisation's means (one or a few output
    positions and many channels: sizes 3 and 4) and the per-example gradient formed and standardised
    (many positions: size 9)."""
    torch.manual_seed(seed)
    module = StandardisedImages(cin, cout, kernel, stride, padding, bias, size, 3)
    x, y = torch.randn(n, cin, size, size, dtype=F64), torch.randint(0, 3, (n,))
    err, _, norm, ghost = compare(module, x, y, bound, shift, seed=seed)
    assert ghost.fallback_names == []
    assert err <= 1e-12 * max(norm, 1)


@settings(max_examples=10, deadline=None)
@given(n=batches, length=st.integers(1, 9), heads=st.sampled_from([1, 2]), bound=bounds,
       shift=st.sampled_from([0.0, 0.1]), seed=st.integers(0, 2**16))
def test_attention_block(n, length, heads, bound, shift, seed):
    torch.manual_seed(seed)
    x, y = torch.randn(n, length, 4, dtype=F64), torch.randint(0, 3, (n,))
    err, _, size, ghost = compare(Attention(4, heads, 3), x, y, bound, shift, seed=seed)
    assert ghost.fallback_names == []
    assert err <= 1e-12 * max(size, 1)


class Awkward(nn.Module):
    """What the rules cannot see: a free parameter, a layer called twice, a Linear head tied to the
    embedding, a Linear whose weight is also used as a matrix outside it, an in-place change of a
    Linear's output, and a layer type without a rule (a grouped convolution)."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(9, 4)
        self.shared = nn.Linear(4, 4)
        self.inplace = nn.Linear(4, 4)
        self.offset = nn.Parameter(torch.randn(4))
        self.grouped = nn.Conv1d(4, 4, 1, groups=2)
        self.reused = nn.Linear(4, 4)
        self.out = nn.Linear(4, 9, bias=False)
        self.out.weight = self.emb.weight

    def forward(self, x):
        h = self.shared(torch.tanh(self.shared(self.emb(x))))       # called twice
        h = torch.relu_(self.inplace(h)) + self.offset
        h = self.grouped(h.transpose(1, 2)).transpose(1, 2)
        h = self.reused(h) + h @ self.reused.weight                # a weight also used outside its layer
        return self.out(h.mean(1))                                  # tied to the embedding


@settings(max_examples=10, deadline=None)
@given(n=batches, bound=bounds, shift=st.sampled_from([0.0, 0.1]), seed=st.integers(0, 2**16))
def test_layers_the_rules_miss_go_to_the_per_example_engine(n, bound, shift, seed):
    torch.manual_seed(seed)
    x, y = torch.randint(0, 9, (n, 5)), torch.randint(0, 9, (n,))
    err, _, size, ghost = compare(Awkward(), x, y, bound, shift, chunk=2, seed=seed)
    assert err <= 1e-12 * max(size, 1)
    # (the tied embedding is book-kept only where its own path carries no gradient: the ReLU closed it,
    # and the head's part is then each example's whole gradient, as the sum's check above confirms)
    assert set(ghost.fallback_names) >= {"shared.weight", "shared.bias", "inplace.weight", "inplace.bias", "offset",
                                         "grouped.weight", "grouped.bias", "reused.weight", "reused.bias"}

def test_clipping_is_active_and_each_example_moves_the_sum_by_at_most_c():
    """The ghost sum is a clipped sum: dropping one example moves it by at most C."""
    torch.manual_seed(1)
    model = FunctionalModel(Tokens(10, 5, 4, 3).to(F64))
    x, y = torch.randint(0, 10, (8, 6)), torch.randint(0, 3, (8,))
    ghost = GhostClipper(model, 4)
    full, _, _ = ghost(x, y, 0.05)
    for i in range(8):
        rest, _, _ = ghost(torch.cat([x[:i], x[i + 1:]]), torch.cat([y[:i], y[i + 1:]]), 0.05)
        assert (full - rest).norm() <= 0.05 * (1 + 1e-9)
    unclipped, _, _ = ghost(x, y, 1e9)
    assert (full - unclipped).norm() > 1e-3


@settings(max_examples=15, deadline=None)
@given(st.lists(st.sampled_from([float("nan"), float("inf"), -float("inf")]), min_size=1, max_size=3),
       st.integers(0, 2**31 - 1))
def test_a_non_finite_example_contributes_zero_to_the_ghost_sum(poison, seed):
    """As in every privatiser (`clip_factors`): an example with a NaN or infinite value contributes
    zero, and the ghost sum equals the sum without it (0 x inf in the book-kept sum would be NaN)."""
    from pazo.models.small_cnn import SmallCNN

    torch.manual_seed(seed % 1000)
    model = FunctionalModel(SmallCNN(1, 3, 6, width=2).to(F64))
    x, y = torch.randn(7, 1, 6, 6, dtype=F64), torch.randint(0, 3, (7,))
    bad = sorted({(seed >> (3 * i)) % 7 for i in range(len(poison))})
    for i, value in zip(bad, poison):
        x[i, 0, seed % 6, (seed // 7) % 6] = value
    keep = [i for i in range(7) if i not in bad]
    got, _, count = GhostClipper(model, 3)(x, y, 0.5)
    want, _, _ = GhostClipper(model, 3)(x[keep], y[keep], 0.5)
    assert torch.isfinite(got).all() and int(count) == len(bad)
    assert torch.allclose(got, want, rtol=1e-12, atol=1e-14)


def test_a_random_forward_with_per_example_parameters_is_refused():
    """The fallback's second forward must be the first again: dropout plus an uncovered parameter."""
    class Dropped(Awkward):
        def forward(self, x):
            return nn.functional.dropout(super().forward(x), 0.5, self.training)

    model = FunctionalModel(Dropped().to(F64))
    x, y = torch.randint(0, 9, (4, 5)), torch.randint(0, 9, (4,))
    with pytest.raises(ConfigError, match="clip_engine=per_example"):
        GhostClipper(model, 2)(x, y, 1.0)


# --- whole DP-SGD steps on the paper-setting models -------------------------------------------------

def _small_cnn():
    from pazo.models.small_cnn import SmallCNN
    return SmallCNN(1, 10, 8, width=4), torch.rand(6, 1, 8, 8, dtype=F64), 10


def _nf_resnet():
    from pazo.models.nf_resnet import NFResNet18
    return NFResNet18(10, width=4), torch.rand(4, 3, 16, 16, dtype=F64), 10


def _vit():
    from pazo.models.vit import build_vit
    module = build_vit("vit_tiny_patch16_224", 5, 16, overrides={"embed_dim": 12, "depth": 1, "num_heads": 2,
                                                                 "patch_size": 8})
    return module, torch.rand(4, 3, 16, 16, dtype=F64), 5


def _lstm():
    from pazo.models.lstm import LSTMClassifier
    return LSTMClassifier(30, 2, embed=6, hidden=4, dropout=0.0), torch.randint(0, 30, (5, 7)), 2


MODELS = {"small_cnn": _small_cnn, "nf_resnet": _nf_resnet, "vit": _vit, "lstm": _lstm}


def noisy_update(make_method, module, x, y, engine, name="dpsgd", public=None):
    model = FunctionalModel(module)
    before = model.flat_params().clone()
    cfg = {"lr": 0.1, "clip": 0.3, "per_example_chunk": 3, "clip_engine": engine}
    if name != "dpsgd":
        cfg["public_batch_size"] = 2
    if public is None:   # (the ghost engine checks its layers on public examples: here the batch's own)
        public = TensorSplit(x, y)
    method = make_method(name, model, cfg, sigma=1.5, b=4, public=public, seed=7, total_steps=3)
    method.step(x, y, 1)
    return model.flat_params() - before, method


@pytest.mark.parametrize("which", sorted(MODELS))
def test_a_noisy_dpsgd_step_is_the_per_example_engines_on_each_paper_model(which, make_method):
    """Same seed, same noisy update to 1e-10 in float64, the clip active; the summary's engine block
    names what went to the per-example engine."""
    updates = {}
    for engine in ("per_example", "ghost"):
        torch.manual_seed(0)
        module, x, classes = MODELS[which]()
        module = module.to(F64)
        y = torch.randint(0, classes, (len(x),), generator=torch.Generator().manual_seed(1))
        updates[engine], method = noisy_update(make_method, module, x, y, engine)
    assert float((updates["ghost"] - updates["per_example"]).abs().max()) <= 1e-10
    assert updates["ghost"].norm() > 0
    block = method.clip_engine_block()["engine"]["clip_engine"]
    assert block["used"] == "ghost"
    expected_fallback = {"small_cnn": False, "nf_resnet": False, "vit": False, "lstm": True}[which]
    assert bool(block["per_example_parameters"]) == expected_fallback


@pytest.mark.parametrize("name", ["dpmd", "dope_sgd"])
def test_dpmd_and_dope_sgd_steps_are_the_per_example_engines(name, make_method):
    updates = {}
    for engine in ("per_example", "ghost"):
        torch.manual_seed(0)
        module, x, _ = _small_cnn()
        public = TensorSplit(torch.rand(6, 1, 8, 8, dtype=F64), torch.randint(0, 10, (6,)))
        y = torch.randint(0, 10, (len(x),), generator=torch.Generator().manual_seed(1))
        updates[engine], _ = noisy_update(make_method, module.to(F64), x, y, engine, name, public)
    assert float((updates["ghost"] - updates["per_example"]).abs().max()) <= 1e-10


def test_auto_picks_ghost_only_where_every_parameter_is_covered(make_method):
    picks = {}
    for which, make in MODELS.items():
        method = make_method("dpsgd", FunctionalModel(make()[0].to(F64)),
                             {"lr": 0.1, "clip": 1.0, "clip_engine": "auto"}, sigma=1.0, b=4)
        picks[which] = method.clip_engine
    assert picks == {"small_cnn": "ghost", "nf_resnet": "ghost", "vit": "ghost", "lstm": "per_example"}
    sgd = make_method("sgd", FunctionalModel(_small_cnn()[0]), {"lr": 0.1, "clip": 1.0})
    assert sgd.clip_engine == "none"


def test_gep_refuses_the_ghost_engine(make_method):
    public = TensorSplit(torch.rand(6, 1, 8, 8), torch.randint(0, 10, (6,)))
    cfg = {"lr": 0.1, "clip": 1.0, "public_batch_size": 2, "clip_engine": "ghost"}
    with pytest.raises(ConfigError, match="GEP"):
        make_method("gep", FunctionalModel(_small_cnn()[0].float()), cfg, sigma=1.0, b=4, public=public)
    gep = make_method("gep", FunctionalModel(_small_cnn()[0].float()), {**cfg, "clip_engine": "auto"},
                      sigma=1.0, b=4, public=public)
    assert gep.clip_engine == "per_example"


def test_the_layer_check_reads_public_examples_or_is_listed_outside_the_guarantee(make_method):
    """Which parameters go to the per-example engine is released in the summary: the check that decides it
    reads public examples where there are any, else the private batch, and the summary says so."""
    module, x, _ = _small_cnn()
    y = torch.randint(0, 10, (len(x),))
    cfg = {"lr": 0.1, "clip": 1.0, "clip_engine": "ghost"}
    with_public = make_method("dpsgd", FunctionalModel(module.to(F64)), cfg, sigma=1.0, b=4,
                              public=TensorSplit(torch.rand(5, 1, 8, 8, dtype=F64), torch.randint(0, 10, (5,))))
    seen = []
    original = with_public.ghost.check_layers
    with_public.ghost.check_layers = lambda xs, ys: (seen.append(xs), original(xs, ys))
    with_public.step(x, y, 1)
    assert len(seen) == 1 and not any(torch.equal(seen[0][:1], x[i:i + 1]) for i in range(len(x)))
    assert with_public.outside_guarantee() == []
    without = make_method("dpsgd", FunctionalModel(_small_cnn()[0].to(F64)), cfg, sigma=1.0, b=4,
                          public=TensorSplit(torch.zeros(0, 1, 8, 8, dtype=F64), torch.zeros(0, dtype=torch.long)))
    without.step(x, y, 1)
    assert any("first private batch" in line for line in without.outside_guarantee())
