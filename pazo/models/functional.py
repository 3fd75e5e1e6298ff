"""A model seen as a function of its parameters: per-example losses at any parameter set.

One object serves the zeroth-order queries (vmapped over stacked parameter sets, or in place),
public-gradient computation and evaluation. Parameters are kept in the module (so the in-place
engine perturbs them directly); `torch.func.functional_call` evaluates other parameter sets.
"""
from __future__ import annotations

import itertools
import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.graph import increment_version
from torch.func import functional_call, grad, vmap


def cross_entropy_per_example(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(outputs, targets, reduction="none")


#: torch.nn layers whose forward does not read `self.training` (exact types: a subclass may)
MODE_FREE_LAYERS = (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.Linear, nn.Embedding, nn.LayerNorm, nn.GroupNorm,
                    nn.ReLU, nn.GELU, nn.SiLU, nn.Tanh, nn.Sigmoid, nn.Softmax, nn.Identity, nn.Flatten,
                    nn.AvgPool1d, nn.AvgPool2d, nn.MaxPool1d, nn.MaxPool2d, nn.AdaptiveAvgPool1d,
                    nn.AdaptiveAvgPool2d, nn.Sequential, nn.ModuleList, nn.ModuleDict)


def add_scaled_(target: torch.Tensor, tensor: torch.Tensor, alpha: float | torch.Tensor) -> None:
    """target += alpha * tensor, in place; alpha a Python number or a 0-dim tensor on the target's
    device (a scale computed there, not read back to the host; taken in the target's dtype)."""
    if isinstance(alpha, torch.Tensor):
        target.addcmul_(tensor, alpha)
    else:
        target.add_(tensor, alpha=alpha)


def train_mode_matters(module: nn.Module) -> bool:
    """Whether switching `module` between train and eval mode can change its outputs. False only
    when every submodule is a layer of `MODE_FREE_LAYERS`, a dropout of p = 0, or a class that
    declares `mode_free_forward = True` (its own forward ignores `self.training`); anything else
    (dropout, batch norm, an unknown class) counts as mode-dependent. The zeroth-order engines skip
    the switch to eval mode when it cannot matter (two recursive walks of the module per step)."""
    for m in module.modules():
        if type(m) in MODE_FREE_LAYERS or getattr(type(m), "mode_free_forward", False):
            continue
        if type(m) in (nn.Dropout, nn.Dropout1d, nn.Dropout2d) and m.p == 0:
            continue
        return True
    return False


def _is_hf_train(method) -> bool:
    """transformers' `PreTrainedModel.train`: nn.Module's, plus re-casting hub kernels only when
    the model's `use_kernels` is on."""
    return getattr(method, "__qualname__", "") == "PreTrainedModel.train" and \
        getattr(method, "__module__", "") == "transformers.modeling_utils"


def _flag_only_modes(module: nn.Module) -> tuple[list[nn.Module], list[nn.Module]] | None:
    """(every submodule, the transformers models among them) when switching the mode only sets
    `training` flags (nn.Module's train(), or transformers' while `use_kernels` is off), else None."""
    modules, hf = list(module.modules()), []
    for m in modules:
        method = type(m).train
        if _is_hf_train(method):
            hf.append(m)
        elif method is not nn.Module.train:
            return None
    return modules, hf


class FunctionalModel:
    """`loss_fn(outputs, targets) -> [B]` per-example losses; cross-entropy by default."""

    def __init__(self, module: nn.Module, loss_fn=cross_entropy_per_example):
        self.module, self.loss_fn = module, loss_fn
        named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
        self.names = [n for n, _ in named]
        self.params = [p for _, p in named]
        self.shapes = [p.shape for p in self.params]
        self.numels = [p.numel() for p in self.params]
        self.dim = sum(self.numels)
        self.train_mode_matters = train_mode_matters(module)
        self.devices = list(dict.fromkeys(p.device for p in self.params))  # distinct, in order
        self._packed: torch.Tensor | None = None
        self._packed_ptrs: list[int] = []
        self._starts: list[int] = []
        self._pack()
        self._flag_only_modes = _flag_only_modes(module)

    def set_training(self, mode: bool) -> None:
        """`module.train(mode)` without its recursive walk: the `training` flag of every submodule
        the module had when this model was made, written directly (the engines switch twice a step,
        between forwards: 1.6 ms for ViT-tiny's 276 submodules by train(), 32 us so, on this
        project's CPU: scripts/count_step_ops.py). A module with a class whose train() does more than set flags (besides
        transformers' with hub kernels off) gets module.train() itself."""
        known = self._flag_only_modes
        if known is None or any(getattr(m, "use_kernels", False) for m in known[1]):
            self.module.train(mode)
            return
        for m in known[0]:
            m.__dict__["training"] = mode

    # --- one flat buffer ----------------------------------------------------------------------
    def _pack(self) -> None:
        """Put the trainable parameters into one flat buffer, each a view of it (the same Parameter
        objects and values), when they are contiguous, on one (real) device and of one
        float32/float64 dtype: the in-place engine then moves them with one operation per group of
        a direction (`Directions.flat_groups`) instead of one per parameter, each of which costs a
        few microseconds of host time between forwards (on a GPU, while it waits: ViT-tiny has 152
        parameters, RoBERTa-base 202). Copied a parameter at a time, each old storage freed as
        its copy is made: on CPU, where pages are committed as they are written, packing needs
        about the largest parameter beside the model; a CUDA allocation is committed whole, so
        there the buffer needs the trainable parameters' size free (else the model is left
        unpacked, and steps move it per parameter), and the freed blocks stay in the caching
        allocator for later tensors."""
        params = self.params
        if (not params or len(self.devices) != 1 or self.devices[0].type == "meta"
                or params[0].dtype not in (torch.float32, torch.float64)
                or any(p.dtype != params[0].dtype or not p.is_contiguous() for p in params)):
            return
        device = self.devices[0]
        if device.type == "cuda" and torch.cuda.mem_get_info(device)[0] < self.dim * params[0].element_size():
            return
        with torch.no_grad():
            buffer = torch.empty(self.dim, dtype=params[0].dtype, device=device)
            for p, view in zip(params, buffer.split(self.numels)):
                view.copy_(p.detach().reshape(-1))
                p.data = view.view(p.shape)          # the old storage goes now, not after the loop
        self._packed, self._packed_ptrs = buffer, [p.data_ptr() for p in params]
        self._starts = [0, *itertools.accumulate(self.numels)]

    def packed(self) -> torch.Tensor | None:
        """The flat [d] buffer the parameters are views of (in `params` order), or None: never
        packed, or moved since (`module.to(...)`, cuDNN's re-flattening of LSTM weights, another
        FunctionalModel packing the same module), which is checked on every call."""
        if self._packed is not None and list(map(torch.Tensor.data_ptr, self.params)) != self._packed_ptrs:
            self._packed = None                      # for good: the parameters live elsewhere now
        return self._packed

    def add_to_packed(self, flat: torch.Tensor, alpha: float | torch.Tensor, bump_versions: bool = True) -> bool:
        """x <- x + alpha * flat with one operation on the packed buffer, if the parameters are
        packed (else False, and nothing done). Their autograd versions are bumped, as the
        per-parameter in-place add would, so a graph that saved them still sees the change
        (`bump_versions=False`: the caller moves them again, with the bump, before anything can
        look: the in-place engine's moves between no-grad queries)."""
        packed = self.packed()
        if packed is None:
            return False
        add_scaled_(packed, flat, alpha)
        if bump_versions:
            increment_version(self.params)
        return True

    def add_groups_to_packed(self, groups, alpha: float | torch.Tensor, bump_versions: bool = True) -> bool:
        """x <- x + alpha * u for u given as (lo, hi, flat entries of parameters lo..hi-1) groups
        (`Directions.flat_groups`), one operation a group on the packed buffer, if the parameters
        are packed (else False, and `groups` not consumed); versions as `add_to_packed`."""
        packed = self.packed()
        if packed is None:
            return False
        starts = self._starts
        for lo, hi, flat in groups:
            add_scaled_(packed[starts[lo]:starts[hi]], flat, alpha)
        if bump_versions:
            increment_version(self.params)
        return True

    # --- flat views -------------------------------------------------------------------------
    def split_flat(self, flat: torch.Tensor) -> list[torch.Tensor]:
        """Per-parameter views of a flat [..., d] tensor."""
        lead = flat.shape[:-1]
        return [chunk.view(*lead, *shape)
                for chunk, shape in zip(flat.split(self.numels, dim=-1), self.shapes)]

    def flatten(self, tensors: list[torch.Tensor]) -> torch.Tensor:
        """One flat [d] vector of per-parameter tensors, on `device` (pieces on other devices of a
        model spread by `model.device_map` are moved there first)."""
        if len(self.devices) > 1:
            tensors = [t.to(self.device) for t in tensors]
        return torch.cat([t.reshape(-1) for t in tensors])

    def flat_params(self) -> torch.Tensor:
        return self.flatten([p.detach() for p in self.params])

    def zeros(self, shape, device: torch.device | None = None) -> torch.Tensor:
        """Zeros of the parameters' dtype on `device` (default `self.device`): sums, and the
        gradients or losses of an empty batch, whose own dtype may be an integer one (token ids)."""
        return torch.zeros(shape, dtype=self.params[0].dtype, device=self.device if device is None else device)

    @property
    def device(self) -> torch.device:
        """Where flat vectors over the parameters (updates, gradients, directions) are made: the
        first parameter's device."""
        return self.params[0].device

    @property
    def input_device(self) -> torch.device:
        """Where a batch goes: the module's own `input_device` (an LM's input embeddings, the
        first module of one spread over devices by `model.device_map`, as accelerate's hooks
        expect), else the first parameter's device."""
        return getattr(self.module, "input_device", None) or self.params[0].device

    # --- losses -------------------------------------------------------------------------------
    def _per_example_loss(self, params: list[torch.Tensor], x: torch.Tensor, y: torch.Tensor):
        return self.loss_fn(functional_call(self.module, dict(zip(self.names, params)), (x,)), y)

    def losses_at(self, params: list[torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Per-example losses [B] at one parameter set."""
        return self._per_example_loss(params, x, y)

    def stacked_losses(self, stacked: list[torch.Tensor], x: torch.Tensor, y: torch.Tensor,
                       randomness: str = "error") -> torch.Tensor:
        """Per-example losses [P, B] at P parameter sets stacked along dim 0, in one vmapped call."""
        return vmap(self._per_example_loss, in_dims=(0, None, None), randomness=randomness)(stacked, x, y)

    def current_losses(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.loss_fn(self.module(x), y)

    def mean_loss_and_grad(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean loss (detached) and its flat gradient [d] over a batch, by ordinary backprop."""
        loss = self.current_losses(x, y).mean()
        grads = torch.autograd.grad(loss, self.params)
        return loss.detach(), self.flatten(list(grads))

    def mean_loss_grad(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Flat gradient [d] of the mean loss over a (public) batch."""
        return self.mean_loss_and_grad(x, y)[1]

    @property
    def own_group_grads(self) -> bool:
        """Whether the module computes the gradients of its losses summed over groups of a batch
        itself (`grads_of_group_sums`: the LSTM, whose fused kernel has no vmap rule and whose loop
        under vmap costs 10x), for per-example gradients and the k public gradients taken together;
        its parameters on one device."""
        return hasattr(self.module, "grads_of_group_sums") and len(self.devices) == 1

    def group_sum_grads(self, x: torch.Tensor, y: torch.Tensor, groups: int) -> tuple[list[torch.Tensor], torch.Tensor]:
        """Per-parameter gradients [groups, *shape] of the summed loss of each of `groups` equal
        consecutive slices of the batch, and the per-example losses [B], by the module's own
        `grads_of_group_sums` (see `own_group_grads`)."""
        grads, losses = self.module.grads_of_group_sums(x, y, self.loss_fn, groups)
        return [grads[n] for n in self.names], losses

    @property
    def grads_together_by_default(self) -> bool:
        """Whether k batches' gradients are taken in one pass by default: on CUDA, where that pass
        issues one set of kernels for k batches (on an H100 together over one by one: 0.50x on
        CIFAR-10's NF-ResNet, 0.91x on Tiny-ImageNet's ViT, 0.40x on the LSTM, whose pass taken
        together is its own group sums; scripts/results/public_grads_cuda.json). On CPU one by one:
        one pass over PAZO-P's k batches saved nothing there and cost 1.26x on cifar_shape (vmap
        makes the convolutions grouped ones) and 2.9x on the LSTM, and it holds k batches'
        activations (`scripts/benchmark_engines.py --public-grads`, scripts/results/public_grads_cpu.json)."""
        return self.device.type == "cuda"

    def takes_together(self, count: int, batched: bool | None = None) -> bool:
        """Whether `mean_loss_grads` takes `count` batches of one shape in one pass (activations of
        all of them at once): asked (`batched`, default the model's preference), more than one
        batch, and the parameters on one device (accelerate's device hooks do not run under vmap)."""
        if batched is None:
            batched = self.grads_together_by_default
        return batched and count > 1 and len(self.devices) == 1

    def grads_together(self, batches: list[tuple[torch.Tensor, torch.Tensor]], batched: bool | None = None) -> bool:
        """Whether `mean_loss_grads` takes these batches in one pass: `takes_together`, and all of
        them of one shape."""
        return self.takes_together(len(batches), batched) and len({(x.shape, y.shape) for x, y in batches}) == 1

    def mean_loss_grads(self, batches: list[tuple[torch.Tensor, torch.Tensor]],
                        batched: bool | None = None) -> torch.Tensor:
        """Flat gradients [k, d] of the mean loss over each of k batches (PAZO-P/S's public
        gradients). Batches of one shape go through one forward and backward pass: the module's
        own over the k batches as groups of one batch (`own_group_grads`), else vmapped over them
        (`torch.func.grad`); dropout masks are drawn per batch. One batch after another with
        `batched=False` or where the model prefers it (`grads_together_by_default`); the result is
        the same."""
        if not self.grads_together(batches, batched):
            return torch.stack([self.mean_loss_grad(x, y) for x, y in batches])
        xs, ys = torch.stack([x for x, _ in batches]), torch.stack([y for _, y in batches])
        if self.own_group_grads:
            sums, _ = self.group_sum_grads(xs.flatten(0, 1), ys.flatten(0, 1), len(batches))
            grads = [g / xs.shape[1] for g in sums]
        else:
            def mean_loss(params, x, y):
                return self._per_example_loss(params, x, y).mean()

            params = [p.detach() for p in self.params]
            grads = vmap(grad(mean_loss), in_dims=(None, 0, 0), randomness="different")(params, xs, ys)
        return torch.cat([g.reshape(len(batches), -1) for g in grads], dim=1)

    @torch.no_grad()
    def evaluate(self, split, batch_size: int = 1024) -> dict[str, float]:
        """Accuracy and mean loss over a whole split (sum over examples / number of examples); for
        a split of question-answer examples, the module's own generation metrics."""
        was_training = self.module.training
        self.module.eval()
        if hasattr(split, "answers") and hasattr(self.module, "evaluate_generation"):
            try:
                return self.module.evaluate_generation(split, batch_size)
            finally:
                self.module.train(was_training)
        correct, loss_sum, n = 0, 0.0, len(split)
        for start in range(0, n, batch_size):
            idx = torch.arange(start, min(start + batch_size, n))
            x, y = split.batch(idx, self.input_device)
            logits = self.module(x)
            y = y.to(logits.device)
            loss_sum += F.cross_entropy(logits, y, reduction="sum").item()
            correct += (logits.argmax(dim=1) == y).sum().item()
        self.module.train(was_training)
        return {"accuracy": correct / max(n, 1), "loss": loss_sum / max(n, 1)}

    def all_finite(self) -> bool:
        return all(math.isfinite(p.detach().abs().max().item()) for p in self.params if p.numel())
