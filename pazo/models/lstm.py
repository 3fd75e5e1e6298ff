"""A 2-layer LSTM classifier with two paths over the same parameters.

* fused: `torch.lstm`, the kernel behind nn.LSTM (cuDNN on CUDA), for every call that is not
  under `torch.func.vmap`: zeroth-order queries of the in-place engine, public gradients, SGD,
  evaluation;
* loop: the recurrence written from plain tensor operations, which `vmap` can batch (the fused
  kernel has no batching rule): stacked parameter sets of the vectorised zeroth-order engine.

The path is chosen per call (`under_vmap`); a test checks both give the same outputs and gradients.
Per-example gradients (DP-SGD and the other first-order private methods) come from one fused
forward and backward, not from `vmap` over the loop: `grads_of_group_sums`.

As in the PAZO authors' IMDB model (embedding 128, hidden 64, dropout 0.2, mean pooling, linear
head), except that the mean pools over real tokens only (the authors' code pooled over padding).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch._C import _functorch

from pazo.config_schema import dropout_rate
from pazo.errors import at_least_one


def under_vmap() -> bool:
    """Whether the current call runs inside `torch.func.vmap` (at any level)."""
    stack = _functorch.get_interpreter_stack()
    return bool(stack) and any(i.key() == _functorch.TransformType.Vmap for i in stack)


class LSTMLayer(nn.Module):
    def __init__(self, input_size: int, hidden: int):
        super().__init__()
        self.hidden = hidden
        bound = hidden ** -0.5  # nn.LSTM's initialisation
        self.w_ih = nn.Parameter(torch.empty(4 * hidden, input_size).uniform_(-bound, bound))
        self.w_hh = nn.Parameter(torch.empty(4 * hidden, hidden).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(4 * hidden).uniform_(-bound, bound))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [B, T, input] -> hidden states [B, T, hidden], by the vmap-friendly loop."""
        gates_x = x @ self.w_ih.T + self.bias  # the input part of every step at once
        h = x.new_zeros(x.shape[0], self.hidden)
        c = x.new_zeros(x.shape[0], self.hidden)
        out = []
        for t in range(x.shape[1]):
            i, f, g, o = (gates_x[:, t] + h @ self.w_hh.T).chunk(4, dim=-1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
            out.append(h)
        return torch.stack(out, dim=1)


@dataclass
class LstmSchema:
    name: str = "lstm"
    vocab_size: int = 10000
    embed: int = 128
    hidden: int = 64
    layers: int = 2
    dropout: float = 0.2

    def __post_init__(self):
        for key in ("vocab_size", "embed", "hidden", "layers"):
            at_least_one(getattr(self, key), f"model.{key}")
        dropout_rate(self.dropout, "model.dropout")


class LSTMClassifier(nn.Module):
    # its fast kernel runs outside vmap only: the in-place engine (engines.choose_engine); k public
    # gradients taken together come from its own group sums (grads_of_group_sums)
    fused_outside_vmap = True

    def __init__(self, vocab_size: int, num_classes: int = 2, embed: int = 128, hidden: int = 64,
                 layers: int = 2, dropout: float = 0.2, pad_id: int = 0):
        super().__init__()
        self.pad_id = pad_id
        self.embedding = nn.Embedding(vocab_size, embed, padding_idx=pad_id)
        self.layers = nn.ModuleList(LSTMLayer(embed if i == 0 else hidden, hidden) for i in range(layers))
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(hidden, num_classes)

    def forward(self, tokens: torch.Tensor, fused: bool | None = None) -> torch.Tensor:
        """`fused`: None picks the fused kernel unless under vmap; True/False forces a path."""
        x = self.dropout(F.embedding(tokens, self.embedding.weight, padding_idx=self.pad_id))
        if fused is None:
            fused = not under_vmap()
        if fused:
            x = self._fused(x)
        else:
            for layer in self.layers:
                x = layer(x)
        return self.head(self.dropout(self._pool(x, tokens)))

    def _pool(self, x: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """The mean of the hidden states over real tokens."""
        mask = (tokens != self.pad_id).unsqueeze(-1).to(x.dtype)
        return (x * mask).sum(dim=1) / mask.sum(dim=1).clamp_min(1.0)

    def _fused(self, x: torch.Tensor) -> torch.Tensor:
        """All layers in one `torch.lstm` call (cuDNN on CUDA). Our single bias per layer is its
        input bias; the hidden bias is a zero vector (nn.LSTM's two biases only ever add)."""
        weights = []
        for layer in self.layers:
            weights += [layer.w_ih, layer.w_hh, layer.bias, torch.zeros_like(layer.bias)]
        h0 = x.new_zeros(len(self.layers), x.shape[0], self.layers[0].hidden)
        # no dropout between layers (as in the loop), so the kernel's train flag changes no value; it is
        # set wherever a backward may follow (cuDNN refuses the backward of a call made with it unset)
        train = self.training or torch.is_grad_enabled()
        out, _, _ = torch.lstm(x, (h0, h0), weights, True, len(self.layers), 0.0, train, False, True)
        return out

    @torch.enable_grad()   # a gradient even where the caller holds no_grad, as vmap(grad) gives
    def grads_of_group_sums(self, tokens: torch.Tensor, targets: torch.Tensor, loss_fn,
                            groups: int) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """The gradient of every parameter [groups, *shape] of the summed loss of each of `groups`
        equal consecutive slices of the batch (per-example gradients: groups = batch size), and
        the per-example losses [B]; from one forward and one backward of the fused kernel.

        An LSTM layer's weights enter only through its gates: gates_t = W_ih x_t + W_hh h_(t-1) + b.
        So a slice's gradients are sums over its examples and time steps of outer products of the
        gates' gradients with x_t and h_(t-1). Autograd gives the gates' gradients when the input
        projection P = W_ih x + b is computed outside the kernel, which then runs with W_ih = I
        (its input gradient is then the gates' gradient, one example's in each row). The embedding's
        gradient is its input rows' gradients added at their token ids (none at padding), the
        head's an outer product. The same values as `vmap` of `grad` over the loop (a test checks);
        the loop's 2 x T steps under `vmap` cost 10x an SGD step on this model.
        """
        batch = tokens.shape[0]
        if batch % groups:
            raise ValueError(f"a batch of {batch} does not split into {groups} equal groups")
        hidden = self.layers[0].hidden
        embedded = F.embedding(tokens, self.embedding.weight.detach(), padding_idx=self.pad_id).requires_grad_()
        x = self.dropout(embedded)
        h0 = x.new_zeros(1, batch, hidden)
        eye = torch.eye(4 * hidden, dtype=x.dtype, device=x.device)
        inputs, projections, states = [], [], []
        for layer in self.layers:
            inputs.append(x)
            projections.append(x @ layer.w_ih.detach().T + layer.bias.detach())
            # single layer, no biases, batch_first; the train flag set (a backward follows; no dropout)
            x, _, _ = torch.lstm(projections[-1], (h0, h0), [eye, layer.w_hh.detach()], False, 1, 0.0,
                                 True, False, True)
            states.append(x)
        pooled = self.dropout(self._pool(x, tokens))
        logits = pooled @ self.head.weight.detach().T + self.head.bias.detach()
        losses = loss_fn(logits, targets)
        d_embedded, d_logits, *d_gates = torch.autograd.grad(losses.sum(), [embedded, logits, *projections])

        def by_group(t: torch.Tensor) -> torch.Tensor:  # [B, T, ...] -> [groups, B / groups x T, ...]
            return t.reshape(groups, -1, t.shape[-1])

        grads = {"head.weight": torch.einsum("gnc,gnh->gch", by_group(d_logits), by_group(pooled.detach())),
                 "head.bias": by_group(d_logits).sum(1)}
        for i, (x_in, d_gate, h) in enumerate(zip(inputs, d_gates, states)):
            grads[f"layers.{i}.w_ih"] = torch.einsum("gsa,gsi->gai", by_group(d_gate), by_group(x_in.detach()))
            grads[f"layers.{i}.w_hh"] = torch.einsum("gsa,gsh->gah", by_group(d_gate[:, 1:]),
                                                     by_group(h.detach()[:, :-1]))
            grads[f"layers.{i}.bias"] = by_group(d_gate).sum(1)
        real = (tokens != self.pad_id).unsqueeze(-1).to(d_embedded.dtype)
        rows = tokens.reshape(groups, -1, 1).expand(-1, -1, d_embedded.shape[-1])
        grads["embedding.weight"] = d_embedded.new_zeros(groups, *self.embedding.weight.shape).scatter_add_(
            1, rows, by_group(d_embedded * real))
        return grads, losses.detach()
