"""GPU check (one H200): the CUDA learner and the generation engines, with bare baselines.

Consumes .whl/model (SmolLM2-135M's config and tokenizer; weights are initialised randomly,
which runs at the same speed); produces one line per measurement and a JSON file:

1. learner: the learner actor (DeepSpeed, NCCL, bf16 ZeRO-1) on its own nats-server,
   against a bare DeepSpeed policy-gradient step on the same batch (bench.learning.learner_overhead);
2. torch engine on CUDA: tokens/s of `policy.torch_engine` against transformers' generate,
   both sampling the same number of tokens;
3. vLLM, if installed: tokens/s of `policy.vllm_engine` against bare vLLM `LLM.generate`,
   and the time of an in-place weight reload. Skipped, and said so, when vLLM is missing.

Each stage fails on its own and says why; the rest still run. `--smoke` shrinks everything
for a dry run on a CPU (`--device cpu`).

    python bench/gpu/gpu_check.py [--out DIR] [--device cuda] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
import traceback
from pathlib import Path

import anyio

from bench.learning.actor_procs import ROOT


def build_model(target: Path, device: str) -> Path:
    """A model folder: carried config and tokenizer, randomly initialised weights."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    carried = ROOT / ".whl" / "model"
    target.mkdir(parents=True, exist_ok=True)
    for f in carried.iterdir():
        shutil.copy(f, target / f.name)
    config = AutoConfig.from_pretrained(target)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    model.save_pretrained(target)
    return target


def stage_learner(model: Path, device: str, smoke: bool) -> dict:
    from bench.learning.learner_overhead import measure

    steps, batch, tokens = (3, 2, 32) if smoke else (5, 32, 512)
    r = measure(steps, batch, tokens, threads=4, device=device, model=f'path = "{model}"')
    print(f"learner: batch {batch} x {tokens} tokens: bare DeepSpeed step {r['bare_s']:.3f} s, "
          f"whetstone train {r['train_s']:.3f} s (x{r['train_ratio']:.2f}), whole step "
          f"{r['step_s']:.3f} s (x{r['step_ratio']:.2f}; includes publishing 257 MB)", flush=True)
    return r


def stage_learner_probe(model: Path, device: str, smoke: bool) -> dict:
    """The learner's Trainer against a bare step on the same engine, in one process."""
    import os
    import subprocess
    import sys

    batch, tokens, steps = (2, 32, 2) if smoke else (32, 512, 5)
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "learning" / "learner_probe.py"), "--device",
                          device, "--model-path", str(model), "--batch", str(batch), "--tokens",
                          str(tokens), "--steps", str(steps)],
                         env={**os.environ, "DS_ACCELERATOR": device, "PYTHONPATH": str(ROOT)},
                         capture_output=True, text=True, timeout=240)
    line = next((x for x in out.stdout.splitlines() if x.startswith("learner probe")), "")
    print(line or f"learner probe: no result; stderr: {out.stderr[-1500:]}", flush=True)
    return {"line": line, "returncode": out.returncode}


def _prompts(n: int) -> list[list[int]]:
    return [[1, 9690, 198, 2683, 314, 260, 3575, 282, 4649, 30] + [100 + i] for i in range(n)]


async def _engine_rate(engine, prompts: list[list[int]], new_tokens: int) -> float:
    from policy.engine import RowSettings, SampleRequest

    settings = RowSettings(1.0, 1.0, new_tokens)
    async with anyio.create_task_group() as tg:
        await tg.start(engine.serve)
        await engine.generate(SampleRequest(prompts[0], 1, RowSettings(1.0, 1.0, 8)))  # warm-up
        began = time.monotonic()
        tokens = 0

        async def one(p: list[int]) -> None:
            nonlocal tokens
            samples = await engine.generate(SampleRequest(p, 1, settings))
            tokens += sum(len(s.token_ids) for s in samples)  # add after the await, not across it

        async with anyio.create_task_group() as inner:
            for p in prompts:
                inner.start_soon(one, p)
        rate = tokens / (time.monotonic() - began)
        tg.cancel_scope.cancel()
    return rate


def stage_torch_engine(model: Path, device: str, smoke: bool) -> dict:
    import torch

    from policy.config import GeneratorConfig, ModelConfig
    from policy.engines import open_engine
    from policy.model import load_model

    n, new = (4, 8) if smoke else (64, 128)
    gen_cfg = GeneratorConfig(engine="torch", device=device, dtype="bfloat16", max_batch=n,
                              max_in_flight=n)
    engine = open_engine(gen_cfg, ModelConfig(path=str(model)), seed=0)
    ours = anyio.run(_engine_rate, engine, _prompts(n), new)
    del engine
    hf = load_model(ModelConfig(path=str(model)), "bfloat16", device)
    ids = torch.tensor(_prompts(n), device=device)
    mask = torch.ones_like(ids)
    hf.generate(ids, attention_mask=mask, do_sample=True, max_new_tokens=8, min_new_tokens=8)
    began = time.monotonic()
    out = hf.generate(ids, attention_mask=mask, do_sample=True, max_new_tokens=new,
                      min_new_tokens=new)
    bare = (out.shape[1] - ids.shape[1]) * n / (time.monotonic() - began)
    print(f"torch engine on {device}: {n} sequences x {new} tokens: {ours:.0f} tokens/s; bare "
          f"transformers generate {bare:.0f} tokens/s (x{ours / bare:.2f})", flush=True)
    return {"tokens_per_s": ours, "bare_tokens_per_s": bare, "ratio": ours / bare}


def stage_vllm(model: Path, smoke: bool) -> dict:
    try:
        import vllm
    except ImportError:
        print("vLLM: SKIPPED, not installed (vllm==0.33.0 is a 336 MB wheel pinning "
              "torch==2.14.0; this image has torch 2.11 and the carry limit is 64 MiB)", flush=True)
        return {"skipped": "vllm not installed"}
    n, new = (4, 8) if smoke else (256, 128)
    llm = vllm.LLM(model=str(model), dtype="bfloat16", gpu_memory_utilization=0.3, seed=0)
    params = vllm.SamplingParams(temperature=1.0, max_tokens=new, min_tokens=new)
    prompts = [vllm.TokensPrompt(prompt_token_ids=p) for p in _prompts(n)]
    llm.generate(prompts[:4], params)
    began = time.monotonic()
    outs = llm.generate(prompts, params)
    bare = sum(len(o.outputs[0].token_ids) for o in outs) / (time.monotonic() - began)
    _shutdown(llm)
    from policy.config import GeneratorConfig, ModelConfig, VllmSettings
    from policy.engines import open_engine

    gen_cfg = GeneratorConfig(engine="vllm", vllm=VllmSettings(gpu_memory_utilization=0.3))
    engine = open_engine(gen_cfg, ModelConfig(path=str(model)), seed=0)
    ours = anyio.run(_engine_rate, engine, _prompts(n), new)
    reload_s = anyio.run(_reload, engine, model)
    print(f"vLLM: {n} sequences x {new} tokens: whetstone engine {ours:.0f} tokens/s; bare vLLM "
          f"{bare:.0f} tokens/s (x{ours / bare:.2f}); in-place weight reload {reload_s:.2f} s",
          flush=True)
    return {"tokens_per_s": ours, "bare_tokens_per_s": bare, "ratio": ours / bare,
            "reload_s": reload_s}


def _shutdown(llm) -> None:
    """Free the bare vLLM engine's GPU memory before the next one starts."""
    import gc

    try:
        llm.llm_engine.shutdown()
    except Exception as exc:  # noqa: BLE001 - best effort; the next stage would report OOM
        print(f"vLLM: bare engine shutdown failed: {exc!r}", flush=True)
    del llm
    gc.collect()


async def _reload(engine, model: Path) -> float:
    from policy.config import ModelConfig
    from policy.model import load_model
    from policy.weights import encode_state

    blob = encode_state(load_model(ModelConfig(path=str(model)), "bfloat16").state_dict())
    began = time.monotonic()
    await engine.load_weights(1, blob)
    return time.monotonic() - began


def main(out: Path, device: str, smoke: bool) -> int:
    results: dict = {"device": device}
    began = time.monotonic()
    model = build_model(Path("/tmp/whet-gpu-model"), device)
    stages = [("learner", lambda: stage_learner(model, device, smoke)),
              ("learner_probe", lambda: stage_learner_probe(model, device, smoke)),
              ("torch_engine", lambda: stage_torch_engine(model, device, smoke)),
              ("vllm", lambda: stage_vllm(model, smoke))]
    failed = 0
    for name, stage in stages:
        try:
            results[name] = stage()
        except Exception as exc:  # noqa: BLE001 - each stage reports on its own
            failed += 1
            results[name] = {"error": repr(exc)}
            print(f"{name}: FAILED: {exc!r}", flush=True)
            traceback.print_exc()
    results["seconds"] = time.monotonic() - began
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_check.json").write_text(json.dumps(results, indent=2, default=str))
    print(f"gpu check done in {results['seconds']:.0f} s, {failed} stage(s) failed; "
          f"{out / 'gpu_check.json'}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="/tmp/whet-gpu-out")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    raise SystemExit(main(Path(args.out), args.device, args.smoke))
