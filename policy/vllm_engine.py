"""The vLLM engine (GPU, `gpu` extra): continuous batching, logprobs, in-place weight reload.

Consumes sample requests and weight versions like every engine; produces samples whose
logprobs are vLLM's *processed* logprobs (after temperature and top-p, the distribution it
sampled from, as the torch engine reports). Requests go to vLLM's `AsyncLLM` as they come:
vLLM batches them continuously, so this module does no batching of its own.

A new version is installed without restarting anything: new requests wait at a gate, the
ones already admitted finish (so no request mixes two versions and each is stamped with
the version it ran on), vLLM pauses (`pause_generation`, dropping the prefix cache), each
worker loads the safetensors file through `policy.vllm_worker.WeightLoader`
(`collective_rpc`), and generation resumes. With `[learner] lora` vLLM starts with LoRA on
and an adapter version is served through it instead (untested here: no GPU with vLLM): its
bytes (already an adapter_model.safetensors) are written to a folder with its
adapter_config.json, added with `add_lora`, and every later request names it; requests
already running finish on the adapter they started with, so nothing pauses.

vLLM is imported only here, so nothing else needs it installed.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import structlog

from policy import model as model_source
from policy.chat import hf_chat_format
from policy.engine import Engine, Sample, SampleRequest
from policy.lora import is_adapter, read_adapter

log = structlog.get_logger("policy.vllm_engine")


VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"The values vLLM accepts for max_lora_rank (its LoRAConfig)."
LORAS_HELD = 2
"Adapters held at once: the current version's, and the one requests started on may still use."


def engine_args(generator_cfg: Any, model_cfg: Any, seed: int,
                lora: Any = None) -> dict[str, Any]:
    """Keyword arguments of vLLM's AsyncEngineArgs for this config (`lora`: `[learner] lora`)."""
    folder = str(model_source.model_dir(model_cfg))
    v = generator_cfg.vllm
    args = dict(model=folder, tokenizer=folder, dtype=generator_cfg.dtype, seed=seed,
                max_model_len=model_cfg.max_context, max_num_seqs=v.max_num_seqs,
                gpu_memory_utilization=v.gpu_memory_utilization, enforce_eager=v.enforce_eager,
                enable_prefix_caching=True, logprobs_mode="processed_logprobs",
                worker_extension_cls="policy.vllm_worker.WeightLoader")
    if lora is not None:
        rank = next(r for r in VLLM_LORA_RANKS if r >= lora.rank)
        args.update(enable_lora=True, max_lora_rank=rank, max_loras=LORAS_HELD)
    return args


class VllmEngine(Engine):
    """The `vllm` engine: vLLM's async engine with continuous batching (GPU)."""

    def __init__(self, generator_cfg: Any, model_cfg: Any, seed: int, lora: Any = None) -> None:
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        self.chat = hf_chat_format(model_source.load_tokenizer(model_cfg))
        self.model_cfg = model_cfg
        self.llm = AsyncLLM.from_engine_args(
            AsyncEngineArgs(**engine_args(generator_cfg, model_cfg, seed, lora)))
        self.lora_enabled = lora is not None
        self._adapter: Any = None
        "The LoRARequest of the running version (None: the base)."
        self._adapters: list[tuple[Any, Path]] = []
        "Adapters added, oldest first, with their folders."
        self._ids = itertools.count()
        self._open = anyio.Event()
        self._open.set()
        self._in_flight = 0
        self._drained = anyio.Event()
        self._drained.set()
        self._tokens = 0

    async def serve(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        try:
            await anyio.sleep_forever()
        finally:
            self.llm.shutdown()

    async def generate(self, request: SampleRequest) -> list[Sample]:
        from vllm import SamplingParams, TokensPrompt
        from vllm.sampling_params import RequestOutputKind

        s = request.settings
        params = SamplingParams(n=request.n, temperature=s.temperature, top_p=s.top_p,
                                max_tokens=s.max_new_tokens, stop=list(s.stop) or None,
                                include_stop_str_in_output=s.include_stop,
                                logprobs=0, output_kind=RequestOutputKind.FINAL_ONLY)
        await self._open.wait()
        version, adapter = self.version, self._adapter
        self._enter()
        try:
            final = None
            async for out in self.llm.generate(TokensPrompt(prompt_token_ids=request.context),
                                               params, request_id=f"whet-{next(self._ids)}",
                                               lora_request=adapter):
                final = out
        finally:
            self._leave()
        assert final is not None
        return [self._sample(c, version) for c in final.outputs]

    def _sample(self, completion: Any, version: int) -> Sample:
        ids = list(completion.token_ids)
        logps = [float(step[tok].logprob) for step, tok in zip(completion.logprobs or [], ids)]
        self._tokens += len(ids)
        return Sample(ids, logps, completion.text, completion.finish_reason or "", version)

    def _enter(self) -> None:
        self._in_flight += 1
        if self._drained.is_set():
            self._drained = anyio.Event()

    def _leave(self) -> None:
        self._in_flight -= 1
        if not self._in_flight:
            self._drained.set()

    async def load_weights(self, version: int, blob: bytes | bytearray | None) -> None:
        if self.lora_enabled and (blob is None or is_adapter(blob)):
            await self._use_adapter(version, blob)
            return
        self._open = anyio.Event()
        try:
            await self._drained.wait()
            await self.llm.pause_generation(mode="wait", clear_cache=True)
            try:
                if blob is None:
                    path = model_source.model_dir(self.model_cfg) / "model.safetensors"
                    await self.llm.collective_rpc("whet_load_weights", args=(str(path),))
                else:
                    await self._load_bytes(blob)
            finally:
                await self.llm.resume_generation()
            self.version = version
        finally:
            self._open.set()

    async def _load_bytes(self, blob: bytes | bytearray) -> None:
        fd, name = tempfile.mkstemp(prefix="whet-weights-", suffix=".safetensors", dir=_scratch())
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(blob)
            await self.llm.collective_rpc("whet_load_weights", args=(name,))
        finally:
            os.unlink(name)

    async def _use_adapter(self, version: int, blob: bytes | bytearray | None) -> None:
        """Serve `version` as base + its adapter (None: the base alone) from the next request on."""
        if blob is None:
            self._adapter, self.version = None, version
            return
        from vllm.lora.request import LoRARequest

        adapter = read_adapter(blob)
        folder = Path(tempfile.mkdtemp(prefix=f"whet-lora-v{version}-", dir=_scratch()))
        (folder / "adapter_model.safetensors").write_bytes(blob)
        config = adapter.config_json(str(model_source.model_dir(self.model_cfg)))
        (folder / "adapter_config.json").write_text(json.dumps(config))
        request = LoRARequest(lora_name=f"policy-v{version}", lora_int_id=version + 1,
                              lora_path=str(folder))
        await self.llm.add_lora(request)
        self._adapters.append((request, folder))
        self._adapter, self.version = request, version
        while len(self._adapters) > LORAS_HELD:
            old, old_folder = self._adapters.pop(0)
            await self.llm.remove_lora(old.lora_int_id)
            shutil.rmtree(old_folder, ignore_errors=True)

    @property
    def stats(self) -> dict[str, float]:
        return {"tokens": float(self._tokens)}


def _scratch() -> Path:
    """Memory-backed scratch space where there is one."""
    return Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())
