"""Seconds per iteration of every method, and of Opacus' DP-SGD, on the same model and batch.

    python scripts/benchmark_methods.py [--device auto] [--settings digits,cifar_shape]
                                        [--iters 30] [--warmup 5] [--out scripts/results/methods_<device>.json]

Synthetic inputs of each setting's shapes (no data set needed). For every method: `warmup`
untimed steps, then `iters` steps, each timed alone with CUDA synchronisation before and after;
we report the median and the 25th/75th percentiles, and on CUDA the peak memory of the timed steps.
Our methods run from the real configs (configs/method/*.yaml) with sigma = 1 and a Poisson-size
batch fixed at b. Opacus (optional: `pip install -r requirements-bench.txt`) runs DP-SGD with
per-sample-gradient hooks and with ghost clipping, on a copy of the same model, batch and clip.
Each zeroth-order method's floor is the bare forward passes it needs (2q, or k + 1 for PAZO-S) at
the median time of one no-grad forward of the same batch, timed in the same run; `floor_ratio` is
its time over that floor. `paper_setting` names the column of the paper's Table 5 a setting
matches (scripts/make_tables.py --benchmark reads this file).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
from hydra import compose, initialize_config_dir
from torch import nn

from pazo import CONFIG_DIR
from pazo.data.base import TensorSplit
from pazo.methods.engines import build_engine
from pazo.models import FunctionalModel, build_model
from pazo.rng import RandomStreams

from pazo.methods import build_method, method_config, method_info
from pazo.privacy.plan import PrivacyPlan

ROOT = Path(__file__).resolve().parents[1]

SETTINGS = {  # input shape, classes, config overrides, expected batch size
    "digits": ((1, 8, 8), 10, ["model=small_cnn"], 64),
    "cifar_shape": ((3, 32, 32), 10, ["model=small_cnn", "model.width=32"], 256),
    # the paper's CIFAR-10 setting (experiment=cifar10: NF-ResNet18, per-method defaults), at the
    # native 32 px and at the authors' 224 px
    "cifar10_nf32": ((3, 32, 32), 10, ["experiment=cifar10"], 64),
    "cifar10_nf224": ((3, 224, 224), 10, ["experiment=cifar10"], 64),
    # the paper's Tiny-ImageNet setting (experiment=tiny_imagenet: timm vit_tiny_patch16_224, 200 classes)
    "tiny_imagenet_vit": ((3, 224, 224), 200, ["experiment=tiny_imagenet"], 64),
    # the paper's IMDB setting (experiment=imdb: 2-layer LSTM over 290 tokens, 10k vocabulary)
    "imdb_lstm": ((290,), 2, ["experiment=imdb"], 64),
    # the paper's MNLI setting: RoBERTa-base prompt model (random weights of roberta-base's shape,
    # so no download), prompts of 128 tokens with one <mask>
    "mnli_roberta": ((128,), 3, ["experiment=mnli"], 64),
}
TEXT_VOCAB = {"imdb_lstm": 10002, "mnli_roberta": 50265}
MASK_ID = 50264  # roberta-base's <mask>
# which column of the paper's Table 5 a setting corresponds to (the authors resize CIFAR-10 to 224)
PAPER_SETTING = {"cifar10_nf224": "cifar10", "tiny_imagenet_vit": "tiny_imagenet", "imdb_lstm": "imdb",
                 "mnli_roberta": "mnli"}
# private forward passes per step of each zeroth-order method: its floor is that many bare forwards
FORWARDS = {"mezo": lambda m: 2 * m.q, "dpzero": lambda m: 2 * m.q, "pazo_m": lambda m: 2 * m.q,
            "pazo_p": lambda m: 2 * m.q, "pazo_p_prime": lambda m: 2 * m.q, "pazo_s": lambda m: m.k + 1}


def synthetic_inputs(setting, n, device="cpu"):
    """Random inputs of a setting's shapes: images in [0, 1), or token ids for text settings."""
    shape, classes, _, _ = SETTINGS[setting]
    if setting in TEXT_VOCAB:
        x = torch.randint(5, TEXT_VOCAB[setting], (n, *shape), device=device)
        if setting == "mnli_roberta":
            x[:, 0], x[:, shape[0] // 2], x[:, -1] = 0, MASK_ID, 2  # <s> ... <mask> ... </s>
    else:
        x = torch.rand(n, *shape, device=device)
    return x, torch.randint(0, classes, (n,), device=device)
DEFAULT_SETTINGS = "digits,cifar_shape"
METHODS = ["sgd", "dpsgd", "dpmd", "dope_sgd", "gep", "mezo", "dpzero", "pazo_m", "pazo_p", "pazo_s"]


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_steps(step, device, warmup, iters):
    for _ in range(warmup):
        step()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    times = []
    for _ in range(iters):
        sync(device)
        t0 = time.perf_counter()
        step()
        sync(device)
        times.append(time.perf_counter() - t0)
    q25, q75 = np.percentile(times, [25, 75])
    row = {"median_s": statistics.median(times), "p25_s": float(q25), "p75_s": float(q75), "iters": iters}
    if device.type == "cuda":
        row["peak_mem_mb"] = torch.cuda.max_memory_allocated(device) / 2**20
    return row


def compose_cfg(overrides):
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=overrides)


def make_module(cfg, setting):
    shape, classes, _, _ = SETTINGS[setting]
    torch.manual_seed(0)
    if setting == "mnli_roberta":
        from transformers import RobertaConfig, RobertaForMaskedLM

        from pazo.models.prompt_mlm import PromptMaskedLM

        mlm = RobertaForMaskedLM(RobertaConfig(vocab_size=50265, max_position_embeddings=514, pad_token_id=1,
                                               bos_token_id=0, eos_token_id=2, type_vocab_size=1,
                                               attn_implementation="eager"))
        # 3 label-word rows; the ids do not matter for timing
        return PromptMaskedLM(mlm, [100, 200, 300], pad_id=1, mask_id=MASK_ID)
    return build_model(cfg.model, shape, classes)


def forward_floor(setting, device, warmup, iters):
    """Seconds of one bare forward pass (no gradient) of the setting's model on a private batch."""
    shape, _, model_overrides, b = SETTINGS[setting]
    cfg = compose_cfg(["method=dpzero", *model_overrides])
    model = FunctionalModel(make_module(cfg, setting).to(device).eval())
    x, y = synthetic_inputs(setting, b, device)

    def forward():
        with torch.no_grad():
            model.current_losses(x, y)
    return time_steps(forward, device, warmup, iters)


def ours(name, setting, device, warmup, iters, extra=()):
    shape, classes, model_overrides, b = SETTINGS[setting]
    cfg = compose_cfg([f"method={name}", *model_overrides, *extra])
    module = make_module(cfg, setting).to(device)
    model = FunctionalModel(module)
    config = method_config(cfg.method)
    plan = PrivacyPlan.with_sigma(1.0 if method_info(name).private else None, b, config.release(), steps=1000)
    public = TensorSplit(*synthetic_inputs(setting, 512))
    method = build_method(config, model=model, plan=plan, streams=RandomStreams(0), public=public, device=device,
                          engine=build_engine(cfg.engine))
    x, y = synthetic_inputs(setting, b, device)
    counter = iter(range(1, 10**9))
    return time_steps(lambda: method.step(x, y, next(counter)), device, warmup, iters), model.dim


def opacus_dpsgd(mode, setting, device, warmup, iters):
    from opacus import PrivacyEngine

    shape, classes, model_overrides, b = SETTINGS[setting]
    cfg = compose_cfg(["method=dpsgd", *model_overrides])
    torch.manual_seed(0)
    module = build_model(cfg.model, shape, classes).to(device)
    optimizer = torch.optim.SGD(module.parameters(), lr=float(cfg.method.lr))
    data = torch.utils.data.TensorDataset(*synthetic_inputs(setting, 4 * b))
    loader = torch.utils.data.DataLoader(data, batch_size=b)
    made = PrivacyEngine(accountant="prv").make_private(
        module=module, optimizer=optimizer, data_loader=loader, noise_multiplier=1.0,
        max_grad_norm=float(cfg.method.clip), poisson_sampling=False, grad_sample_mode=mode,
        criterion=nn.CrossEntropyLoss())
    model, optimizer, criterion = made[0], made[1], (made[2] if mode == "ghost" else nn.CrossEntropyLoss())
    x, y = synthetic_inputs(setting, b, device)

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
    return time_steps(step, device, warmup, iters)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--settings", default=DEFAULT_SETTINGS, help=f"from {', '.join(SETTINGS)}")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--out", default=None)
    parser.add_argument("--override", action="append", default=[],
                        help="extra config override for our methods, e.g. method.grad_memory_mb=8192")
    args = parser.parse_args()
    device = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device)
    try:
        import opacus  # noqa: F401
        opacus_modes = ["hooks", "ghost"]
    except ImportError:
        opacus_modes = []
        print("opacus is not installed (pip install -r requirements-bench.txt): skipping it")
    rows = []
    for setting in args.settings.split(","):
        jobs = [(name, "pazo", lambda name=name: ours(name, setting, device, args.warmup, args.iters, args.override))
                for name in args.methods.split(",")]
        jobs += [("dpsgd", f"opacus-{mode}", lambda mode=mode: (opacus_dpsgd(
            mode, setting, device, args.warmup, args.iters), None)) for mode in opacus_modes]
        floor = forward_floor(setting, device, args.warmup, args.iters)["median_s"]
        for name, impl, job in jobs:
            base = {"setting": setting, "method": name, "impl": impl, "batch_size": SETTINGS[setting][3],
                    **({"paper_setting": PAPER_SETTING[setting]} if setting in PAPER_SETTING else {})}
            try:
                row, dim = job()
                if impl == "pazo" and name in FORWARDS:
                    method_cfg = compose_cfg([f"method={name}", *SETTINGS[setting][2], *args.override]).method
                    n_fwd = FORWARDS[name](method_cfg)
                    row.update(forwards=n_fwd, floor_s=n_fwd * floor, floor_ratio=row["median_s"] / (n_fwd * floor))
                rows.append({**base, **({"dim": dim} if dim else {}), **row})
            except Exception as err:  # e.g. Opacus without a grad sampler for a layer: record why
                rows.append({**base, "error": f"{type(err).__name__}: {str(err)[:300]}"})
            finally:
                if device.type == "cuda":
                    torch.cuda.empty_cache()
            print(json.dumps(rows[-1]))
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu x{os.cpu_count()}"
    out = Path(args.out or ROOT / "scripts" / "results" / f"methods_{device.type}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"command": "python " + " ".join(sys.argv), "device": name,
                               "torch": torch.__version__, "platform": platform.platform(),
                               "results": rows}, indent=2) + "\n")
    print(f"wrote {out}")
    print("\n| setting | method | impl | median s/iter | p25-p75 | x floor |"
          + (" peak MB |" if device.type == "cuda" else ""))
    for r in rows:
        if "error" in r:
            print(f"| {r['setting']} | {r['method']} | {r['impl']} | failed: {r['error'][:80]} |")
            continue
        mem = f" {r['peak_mem_mb']:.0f} |" if "peak_mem_mb" in r else ""
        ratio = f"{r['floor_ratio']:.2f}" if "floor_ratio" in r else ""
        print(f"| {r['setting']} | {r['method']} | {r['impl']} | {r['median_s']:.5f} | "
              f"{r['p25_s']:.5f}-{r['p75_s']:.5f} | {ratio} |{mem}")


if __name__ == "__main__":
    main()
