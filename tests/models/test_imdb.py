"""IMDB setting: loader on saved-to-disk fixtures, vocabulary and padding, the vmap-friendly LSTM,
and a tiny run of experiment=imdb through Hydra."""
import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from model_checks import check_engines_and_per_example_grads
from fixtures import write_imdb_and_amazon
from pazo.data.imdb import load_imdb_bundle
from pazo.data.text import PAD, UNK, build_vocab, encode, source_vocab, tokenize
from pazo.errors import ConfigError, DataMissingError
from pazo.models import FunctionalModel
from pazo.methods.per_example import clipped_sum, per_example_grads
from pazo.models.lstm import LSTMClassifier, LSTMLayer
from pazo.train import run


@pytest.fixture(scope="module")
def text_root(tmp_path_factory):
    return write_imdb_and_amazon(tmp_path_factory.mktemp("text"))


def cfg(root, **kw):
    return OmegaConf.create({"root": str(root), "download": False, "vocab_size": 12, "max_length": 10,
                             "public_size": 20, "public_with_title": False, "test_size": 16,
                             "vocab_source": "public", **kw})


def test_vocabulary_and_padding_by_hand():
    assert tokenize("Great movie, GREAT plot!") == ["great", "movie", "great", "plot"]
    vocab = build_vocab(["a b b c", "b c c c"], size=2)
    assert vocab == {"c": 2, "b": 3}  # most frequent first, ids from 2
    ids = encode(["c b a", "b"], vocab, max_length=4)
    assert ids.tolist() == [[2, 3, UNK, PAD], [3, PAD, PAD, PAD]]
    assert encode(["c c c c c c"], vocab, max_length=3).tolist() == [[2, 2, 2]]  # cut at max_length


def test_loader_sizes_seeding_and_sources(text_root):
    a = load_imdb_bundle(cfg(text_root), np.random.default_rng(0))
    b = load_imdb_bundle(cfg(text_root), np.random.default_rng(0))
    assert (len(a.private), len(a.public), len(a.test)) == (60, 20, 16)
    assert a.private.inputs.shape == (60, 10) and a.input_shape == (10,) and a.num_classes == 2
    assert torch.equal(a.public.inputs, b.public.inputs) and torch.equal(a.test.inputs, b.test.inputs)
    c = load_imdb_bundle(cfg(text_root), np.random.default_rng(1))
    assert not torch.equal(a.public.inputs, c.public.inputs)
    assert int(a.private.inputs.max()) <= 12 + 1 and a.info["public"] == "amazon_polarity"


def test_vocabulary_is_counted_on_the_public_reviews_unless_private_is_asked(text_root, monkeypatch):
    import pazo.data.imdb as imdb
    from datasets import load_from_disk

    built = []
    monkeypatch.setattr(imdb, "source_vocab", lambda *a: built.append(source_vocab(*a)) or built[-1])
    amazon = load_from_disk(str(text_root / "amazon_polarity"))["train"]
    amazon_tokens = {tok for text in amazon["content"] for tok in tokenize(text)}
    public = load_imdb_bundle(cfg(text_root, vocab_size=1000, max_length=40), np.random.default_rng(0))
    vocab = built[-1][0]
    assert set(vocab) <= amazon_tokens and not set(vocab) & {"movie", "film", "plot", "actor"}
    assert not (public.public.inputs == UNK).any() and (public.private.inputs == UNK).any()
    assert public.describe()["vocab_source"] == "public" and "outside_guarantee" not in public.describe()
    assert public.info["vocab_found"] == len(vocab)
    private = load_imdb_bundle(cfg(text_root, vocab_size=1000, max_length=40, vocab_source="private"),
                               np.random.default_rng(0))
    assert {"movie", "film", "plot", "actor"} <= set(built[-1][0]) and not (private.private.inputs == UNK).any()
    assert private.describe()["vocab_source"] == "private"
    assert any("does not cover" in line for line in private.describe()["outside_guarantee"])
    with pytest.raises(ConfigError, match="dataset.vocab_source must be public or private, got 'both'"):
        load_imdb_bundle(cfg(text_root, vocab_source="both"), np.random.default_rng(0))


def test_missing_data_message(tmp_path):
    with pytest.raises(DataMissingError, match="imdb is missing.*dataset.download=true"):
        load_imdb_bundle(cfg(tmp_path), np.random.default_rng(0))


def lstm():
    torch.manual_seed(0)
    return FunctionalModel(LSTMClassifier(14, embed=8, hidden=6, dropout=0.0))


def test_pooling_ignores_padding():
    model = lstm().module.eval()
    short = torch.tensor([[5, 6, 7, 0, 0, 0]])
    longer = torch.tensor([[5, 6, 7, 0, 0, 0, 0, 0, 0, 0]])
    assert torch.allclose(model(short), model(longer), atol=1e-6)
    assert not torch.allclose(model(short), model(torch.tensor([[5, 6, 8, 0, 0, 0]])))


def test_lstm_under_vmap_both_engines_and_per_example_grads():
    model = lstm()
    x, y = torch.randint(1, 14, (4, 7)), torch.tensor([0, 1, 1, 0])
    x[0, 4:] = PAD
    check_engines_and_per_example_grads(model, x, y, chunk=3, atol=1e-6)


@pytest.mark.parametrize("train", [False, True])
def test_fused_and_loop_lstm_paths_give_the_same_outputs_and_gradients(train):
    """The fused kernel (every call outside vmap) and the vmap-friendly loop are one model."""
    model = lstm()
    model.module.train(train)
    x, y = torch.randint(1, 14, (5, 9)), torch.tensor([0, 1, 1, 0, 1])
    x[0, 3:], x[2, 7:] = PAD, PAD
    outs, grads = [], []
    for fused in (True, False):
        out = model.module(x, fused=fused)
        loss = torch.nn.functional.cross_entropy(out, y)
        grads.append(torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, model.params)]))
        outs.append(out.detach())
    assert torch.allclose(outs[0], outs[1], atol=1e-6)
    assert torch.allclose(grads[0], grads[1], atol=1e-6) and grads[0].abs().max() > 1e-4


def loop_per_example_grads(model, x, y):
    """Per-example gradients by `vmap` of `grad` over the vmap-friendly loop (the general path)."""
    from torch.func import grad, vmap

    def loss_one(params, xi, yi):
        return model.losses_at(params, xi.unsqueeze(0), yi.unsqueeze(0)).squeeze(0)
    grads = vmap(grad(loss_one), in_dims=(None, 0, 0))([p.detach() for p in model.params], x, y)
    return torch.cat([g.reshape(len(x), -1) for g in grads], dim=1)


@pytest.mark.parametrize("layers,dtype", [(1, torch.float64), (2, torch.float64), (2, torch.float32)])
def test_lstm_per_example_gradients_from_the_fused_kernel_equal_vmap_over_the_loop(layers, dtype, monkeypatch):
    """DP-SGD's per-example gradients of the LSTM come from one fused forward and backward
    (`grads_of_group_sums`), equal to `vmap` of `grad` over the loop, in every parameter (the
    embedding's padding row gets none); group sums are sums of those rows. In float32 too, the
    dtype runs use, whose CPU kernel is another (oneDNN); under no_grad as well."""
    torch.manual_seed(0)
    model = FunctionalModel(LSTMClassifier(14, embed=8, hidden=6, layers=layers, dropout=0.0).to(dtype))
    x, y = torch.randint(1, 14, (6, 9)), torch.tensor([0, 1, 1, 0, 1, 0])
    x[0, 3:], x[2, 7:], x[4, :2] = PAD, PAD, PAD
    reference = loop_per_example_grads(model, x, y)
    atol = 1e-12 if dtype == torch.float64 else 1e-6
    monkeypatch.setattr(LSTMLayer, "forward", lambda *a: pytest.fail("the loop was taken"))
    rows = per_example_grads(model, x, y, chunk=4)
    assert model.own_group_grads and rows.shape == (6, model.dim) and rows.dtype == dtype
    assert torch.allclose(rows, reference, atol=atol)
    with torch.no_grad():
        assert torch.allclose(per_example_grads(model, x, y, chunk=4), reference, atol=atol)
    for name, piece in zip(model.names, model.split_flat(rows)):
        assert piece.abs().amax() > 1e-3, name  # every parameter's gradient is checked, none is all zero
    embedding = model.split_flat(rows)[model.names.index("embedding.weight")]
    assert embedding[:, PAD].abs().max() == 0
    sums, losses = model.group_sum_grads(x, y, groups=2)
    assert torch.allclose(torch.cat([g.reshape(2, -1) for g in sums], dim=1), rows.view(2, 3, -1).sum(1), atol=atol)
    assert torch.allclose(losses, model.current_losses(x, y).detach(), atol=atol)
    with pytest.raises(ValueError, match="a batch of 6 does not split into 4 equal groups"):
        model.group_sum_grads(x, y, groups=4)


def test_lstm_per_example_gradients_in_train_mode_draw_dropout_per_example():
    """With dropout in train mode each example's gradient is one backward of that example's own
    masks: two copies of one example get different gradients (in eval mode the same), the
    clipped sum differs between two draws, and another example's tokens leave a row as it was
    under the same seed (nothing crosses between examples)."""
    torch.manual_seed(0)
    model = FunctionalModel(LSTMClassifier(14, embed=8, hidden=6, dropout=0.5))
    x, y = torch.randint(1, 14, (4, 7)), torch.tensor([0, 0, 1, 0])
    x[1] = x[0]
    model.module.train()
    rows = per_example_grads(model, x, y, chunk=4)
    assert not torch.allclose(rows[0], rows[1])
    a, b = clipped_sum(model, x, y, 4, 1.0)[0], clipped_sum(model, x, y, 4, 1.0)[0]
    assert torch.isfinite(a).all() and not torch.allclose(a, b)
    other = x.clone()
    other[3] = torch.randint(1, 14, (7,))
    torch.manual_seed(5)
    before = per_example_grads(model, x, y, chunk=4)
    torch.manual_seed(5)
    after = per_example_grads(model, other, y, chunk=4)
    assert torch.equal(before[:3], after[:3]) and not torch.allclose(before[3], after[3])
    model.module.eval()
    rows = per_example_grads(model, x, y, chunk=4)
    assert torch.allclose(rows[0], rows[1], atol=1e-7)
    assert torch.allclose(clipped_sum(model, x, y, 4, 1.0)[0], clipped_sum(model, x, y, 2, 1.0)[0], atol=1e-6)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (cuDNN's LSTM)")
def test_lstm_per_example_gradients_on_cuda_equal_the_loop_in_train_and_eval_mode():
    """On cuDNN, whose backward needs the kernel's train flag, in eval mode as well as in train
    mode (no dropout: the same values); float32, cuDNN's TF32 off for the comparison."""
    torch.manual_seed(0)
    model = FunctionalModel(LSTMClassifier(14, embed=8, hidden=6, layers=2, dropout=0.0).cuda())
    x, y = torch.randint(1, 14, (6, 9), device="cuda"), torch.tensor([0, 1, 1, 0, 1, 0], device="cuda")
    x[0, 3:] = PAD
    reference = loop_per_example_grads(model, x, y)
    tf32 = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    try:
        for train in (True, False):
            model.module.train(train)
            assert torch.allclose(per_example_grads(model, x, y, chunk=6), reference, atol=1e-5)
            assert torch.isfinite(model.mean_loss_grads([(x, y), (x, y)], batched=True)).all()
    finally:
        torch.backends.cudnn.allow_tf32 = tf32


def test_lstm_takes_the_fused_path_outside_vmap_only(monkeypatch):
    from torch.func import vmap
    model = lstm().module.eval()
    calls = []
    real = torch.lstm
    monkeypatch.setattr(torch, "lstm", lambda *a: calls.append(1) or real(*a))
    x = torch.randint(1, 14, (2, 6))
    model(x)
    assert len(calls) == 1
    vmap(lambda t: model(t.unsqueeze(0)).squeeze(0))(x)
    assert len(calls) == 1


@pytest.mark.slow   # a whole run (about 15 s); in the quick suite: the loader and LSTM tests above
def test_tiny_run_of_the_imdb_experiment(text_root, hydra_cfg, tmp_path):
    c = hydra_cfg("experiment=imdb", "method=pazo_m")
    assert c.model.vocab_size == 10000 and c.method.lr == 2.0 and c.train.epochs == 100
    s = run(hydra_cfg("experiment=imdb", "method=pazo_p", f"dataset.root={text_root}", "dataset.vocab_size=20",
                      "dataset.max_length=12", "dataset.public_size=20", "dataset.test_size=16",
                      "train.batch_size=16", "method.public_batch_size=8", "model.hidden=8", "model.embed=8"),
            tmp_path)
    assert s["status"] == "finished" and s["privacy"]["within_budget"] and s["data"]["n_public"] == 20
