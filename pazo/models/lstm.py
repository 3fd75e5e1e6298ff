"""A 2-layer LSTM classifier with two paths over the same parameters.

* fused: `torch.lstm`, the kernel behind nn.LSTM (cuDNN on CUDA), for every call that is not
  under `torch.func.vmap`: zeroth-order queries of the in-place engine, public gradients, SGD,
  evaluation;
* loop: the recurrence written from plain tensor operations, which `vmap` can batch (the fused
  kernel has no batching rule): per-example gradients and stacked parameter sets of the
  vectorised zeroth-order engine.

The path is chosen per call (`under_vmap`); a test checks both give the same outputs and gradients.

As in the PAZO authors' IMDB model (embedding 128, hidden 64, dropout 0.2, mean pooling, linear
head), except that the mean pools over real tokens only (the authors' code pooled over padding).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch._C import _functorch


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


class LSTMClassifier(nn.Module):
    fused_outside_vmap = True  # see FunctionalModel.batches_grads_under_vmap

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
        mask = (tokens != self.pad_id).unsqueeze(-1).to(self.head.weight.dtype)
        x = self.dropout(F.embedding(tokens, self.embedding.weight, padding_idx=self.pad_id))
        if fused is None:
            fused = not under_vmap()
        if fused:
            x = self._fused(x)
        else:
            for layer in self.layers:
                x = layer(x)
        pooled = (x * mask).sum(dim=1) / mask.sum(dim=1).clamp_min(1.0)  # mean over real tokens
        return self.head(self.dropout(pooled))

    def _fused(self, x: torch.Tensor) -> torch.Tensor:
        """All layers in one `torch.lstm` call (cuDNN on CUDA). Our single bias per layer is its
        input bias; the hidden bias is a zero vector (nn.LSTM's two biases only ever add)."""
        weights = []
        for layer in self.layers:
            weights += [layer.w_ih, layer.w_hh, layer.bias, torch.zeros_like(layer.bias)]
        h0 = x.new_zeros(len(self.layers), x.shape[0], self.layers[0].hidden)
        # no dropout between layers (as in the loop); batch_first
        out, _, _ = torch.lstm(x, (h0, h0), weights, True, len(self.layers), 0.0, self.training, False, True)
        return out
