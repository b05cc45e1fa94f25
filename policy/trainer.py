"""One DeepSpeed rank of the learner: policy-gradient and SFT steps, checkpoints, weights.

Consumes training samples (the same full list on every rank; each rank takes its shard),
checkpoint and export requests; produces optimizer updates, DeepSpeed checkpoints (the
learner's bookkeeping as client state) and bf16 weight bytes on rank 0 (with `[learner] lora`
the adapters alone, `policy.lora`; its checkpoints leave out the frozen base). CPU runs use
DeepSpeed's CPU accelerator with gloo, GPU runs NCCL. Every public method is collective: all
ranks call it in the same order (`policy.ranks`). A checkpoint counts once every rank wrote
it, and every rank resumes from the tag rank 0's `latest` names (`policy.rank_checkpoints`).
It knows nothing of the bus, groups or versions.
"""

from __future__ import annotations

import contextlib
import inspect
import math
import os
import time
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from policy.batch import TrainSample, collate, placeholder, shard, split_even
from policy.config import TrainerConfig
from policy.deepspeed_setup import ds_config, import_engine
from policy.extensions import skip_shared_memory_op
from policy.precision import weights_dtype
from policy.rank_checkpoints import RankCheckpoints
from policy.shared_prompt import micro_batches, prefix_logits, shared_prefix


class Trainer:
    """One rank's DeepSpeed engine: setup and resume, train steps, checkpoints, weights."""

    def __init__(self, config: TrainerConfig, checkpoint_dir: Path) -> None:
        self.config = config
        self.lc = config.learner
        self.dir = Path(checkpoint_dir)
        self.rank = int(os.environ.get("RANK", "0"))
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.device = "cpu"
        self.temperature = config.sampling.temperature or 1.0
        self.threads: Callable[[], int] | None = None
        ("Threads to train on from the next micro-batch or hooked layer (`policy.spare_cores`); "
         "None: as started.")
        self.threads_used = 0
        "The most threads a micro-batch of the last `train` ran on."
        self.layers_hooked = 0
        "Decoder layers that read `threads` too (`policy.spare_cores.switch_points`)."
        self.prefix_reads_saved = 0
        "Token positions the last `train` did not run again: shared prefixes read once."
        self.checkpoints = RankCheckpoints(self.dir, self.rank, self.world, self.lc)

    def _bind(self) -> None:
        if self.lc.device == "cuda":
            import torch

            torch.cuda.set_device(self.local_rank)

    def setup(self, join: Callable[[str], None] | None = None) -> dict:
        """Join the process group (`join(backend)` forms it where the ranks met through the
        bus; otherwise from MASTER_ADDR/MASTER_PORT), build the engine, load the checkpoint
        rank 0's `latest` names; returns its client state ({} if none)."""
        import_engine(self.lc.device)
        import deepspeed

        from policy.model import load_model

        self._bind()
        self.device = f"cuda:{self.local_rank}" if self.lc.device == "cuda" else "cpu"
        backend = "nccl" if self.lc.device == "cuda" else "gloo"
        if join is not None:
            join(backend)  # deepspeed then adopts the group
        skip_shared_memory_op(self.world)
        deepspeed.init_distributed(dist_backend=backend, timeout=timedelta(days=7))
        model = load_model(self.config.model, "float32", self.device)
        # transformers renamed `past_key_values` to `cache` (5.x); take whichever it reads.
        self.cache_arg = ("cache" if "cache" in inspect.signature(model.forward).parameters
                          else "past_key_values")
        self.model_config = model.config
        if self.lc.lora is not None:
            from policy.lora import trainable_state_only, wrap

            model = wrap(model, self.lc.lora)
            trainable_state_only(model)
        model.train()
        self.pad_id = model.config.pad_token_id or 0
        self.vocab_size = int(model.get_input_embeddings().num_embeddings)
        config = ds_config(self.lc, self.world)
        tag = self.checkpoints.agreed_tag()
        # A fresh start only: a checkpoint restores its own master weights below.
        exact = ({n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
                 if tag is None and self.lc.master_from_checkpoint and config["bf16"]["enabled"]
                 else {})
        self.engine, *_ = deepspeed.initialize(
            model=model, model_parameters=[p for p in model.parameters() if p.requires_grad],
            config=config)
        if exact:
            _set_master(self.engine.module, exact)
        self.reference = None
        if self.lc.kl_coef > 0 and self.lc.lora is None:  # with LoRA: the adapters switched off
            self.reference = load_model(self.config.model,
                                        weights_dtype("auto", self.lc.device), self.device)
        self.dir.mkdir(parents=True, exist_ok=True)
        if tag is None:
            return {}
        if not (self.dir / tag).is_dir():
            raise FileNotFoundError(
                f"learner rank {self.rank}: rank 0 resumes from checkpoint {tag}, which "
                f"{self.dir} lacks. Each rank must keep its checkpoint folder across restarts "
                "(a volume per host), or start afresh with every rank's folder emptied.")
        self.checkpoints.check_kind(tag)
        # A LoRA checkpoint holds no frozen base weights: those come from the model, as above.
        path, client = self.engine.load_checkpoint(str(self.dir), tag=tag,
                                                   load_module_strict=self.lc.lora is None)
        return dict(client or {}, checkpoint=str(path), optimizer_steps=self.engine.global_steps)

    def train(self, samples: list[TrainSample], batch_tokens: int = 0) -> dict[str, float]:
        """One batch: `minibatches` optimizer updates over these samples, their token losses
        summed by `learner.loss_divisor` (`batch_tokens`: every completion token of the
        batch, zero-signal samples included; 0 if not known)."""
        from policy.objective import sample_scales

        self._bind()
        began = time.monotonic()
        totals: dict[str, float] = {}
        self.threads_used = 0
        self.prefix_reads_saved = 0
        minis = split_even(samples, max(1, min(self.lc.minibatches, len(samples))))
        micros_all = [self._micro_batches(m, self.lc.shared_prompt) for m in minis]
        # The proximal policy is the weights before this batch's first step: the first
        # minibatch's own forward gives it (None), the later ones need it computed now.
        prox_all = [None] + [self._proximal(m) for m in micros_all[1:]]
        for mini, micros, prox in zip(minis, micros_all, prox_all):
            scales = sample_scales([s.tokens for s in mini], self.lc.loss_divisor,
                                   batch_tokens=batch_tokens, batch_size=self.config.batch_size,
                                   max_new_tokens=self.config.sampling.max_new_tokens,
                                   minibatches=len(minis))
            scale_of = {id(s): c for s, c in zip(mini, scales)}
            for i, micro in enumerate(micros):
                self._take_threads()
                loss, stats = self._loss(micro, None if prox is None else prox[i], scale_of)
                self.engine.backward(loss)
                for k, v in stats.items():
                    totals[k] = totals.get(k, 0.0) + v
            self.engine.step()
        norm = self.engine.get_global_grad_norm()
        if self.world > 1:
            totals = self._summed(totals)
        tokens = max(totals.get("tokens", 0.0), 1.0)
        out = {k: v / tokens for k, v in totals.items() if k != "tokens"}
        out.update(tokens=totals.get("tokens", 0.0), train_s=time.monotonic() - began,
                   prefix_reads_saved=float(self.prefix_reads_saved),
                   threads=float(self.threads_used or self._threads_now()),
                   optimizer_steps=float(self.engine.global_steps),
                   grad_norm=float(norm) if norm is not None and math.isfinite(float(norm)) else -1.0)
        return out

    @staticmethod
    def _threads_now() -> int:
        import torch

        return torch.get_num_threads()

    def _take_threads(self) -> None:
        """Run on `threads()` threads from here on (set in this thread: the count is per
        calling thread); called before each micro-batch and each decoder layer."""
        if self.threads is None:
            return
        import torch

        wanted = self.threads()
        if wanted != torch.get_num_threads():
            torch.set_num_threads(wanted)
        self.threads_used = max(self.threads_used, wanted)

    def sft_step(self, samples: list[TrainSample]) -> dict[str, float]:
        """One optimizer update of supervised fine-tuning: the token mean, over `samples`,
        of the negative log-likelihood of their trained (`sampled`) tokens at temperature 1.
        Returns that mean (before the update), the tokens and the step's seconds."""
        self._bind()
        began = time.monotonic()
        tokens = max(1, sum(int(s.sampled[1:].sum()) for s in samples))
        nll = 0.0
        for micro in self._micro_batches(samples):
            summed = self._nll_sum(micro)
            # DeepSpeed averages gradients over ranks, so scale up.
            self.engine.backward(summed * (self.world / tokens))
            nll += float(summed.detach())
        self.engine.step()
        if self.world > 1:
            nll = self._summed({"nll": nll})["nll"]
        norm = self.engine.get_global_grad_norm()
        return {"loss": nll / tokens, "tokens": float(tokens),
                "train_s": time.monotonic() - began,
                "grad_norm": float(norm) if norm is not None and math.isfinite(float(norm)) else -1.0}

    def sft_loss(self, samples: list[TrainSample]) -> float:
        """The token-mean negative log-likelihood of `samples`' trained tokens, no update."""
        import torch

        self._bind()
        tokens = max(1, sum(int(s.sampled[1:].sum()) for s in samples))
        with torch.no_grad():
            nll = sum(float(self._nll_sum(m)) for m in self._micro_batches(samples))
        if self.world > 1:
            nll = self._summed({"nll": nll})["nll"]
        return nll / tokens

    def _nll_sum(self, micro: list[TrainSample]) -> Any:
        from policy.objective import masked_nll

        batch = self._tensors(micro)
        logits = self.engine(input_ids=batch["input_ids"]).logits
        return masked_nll(logits[:, :-1], batch["targets"], batch["mask"])

    def _summed(self, totals: dict[str, float]) -> dict[str, float]:
        import torch
        import torch.distributed as dist

        keys = sorted(totals)
        values = torch.tensor([totals[k] for k in keys], dtype=torch.float64, device=self.device)
        dist.all_reduce(values)
        return dict(zip(keys, values.tolist()))

    def _micro_batches(self, mini: list[TrainSample], prompt_wise: bool = False
                       ) -> list[list[TrainSample]]:
        """This rank's micro-batches of `mini` (`policy.shared_prompt.micro_batches`)."""
        return micro_batches(shard(mini, self.world), self.rank, self.lc.micro_batch_size,
                             placeholder(self.pad_id), prompt_wise)

    def _tensors(self, micro: list[TrainSample], prompt_wise: bool = False) -> dict[str, Any]:
        """The micro-batch as tensors. `prompt_wise`: `prefix` holds the tokens every row
        shares (`policy.shared_prompt.shared_prefix`), and the per-position tensors (targets,
        mask, behav, advantages) begin after them."""
        import torch

        arrays = collate(micro, self.pad_id)
        start = shared_prefix(micro) if prompt_wise else 0
        for k in ("targets", "mask", "behav", "advantages"):
            arrays[k] = np.ascontiguousarray(arrays[k][:, start:])
        batch = {k: torch.from_numpy(v).to(self.device) for k, v in arrays.items()}
        batch["prefix"] = start
        self.prefix_reads_saved += start * (len(micro) - 1)
        return batch

    def _logprobs(self, model: Any, batch: dict[str, Any]) -> Any:
        from policy.objective import token_logprobs

        logits = prefix_logits(model, batch["input_ids"], batch.get("prefix", 0),
                               self.model_config, self.cache_arg)
        return token_logprobs(logits[:, :-1], batch["targets"], self.temperature)

    def _proximal(self, micros: list[list[TrainSample]]) -> list[Any]:
        """The log-probabilities of each of a minibatch's micro-batches, no gradient."""
        import torch

        with torch.no_grad():
            return [self._logprobs(self.engine, self._tensors(m, self.lc.shared_prompt))
                    for m in micros]

    def _loss(self, micro: list[TrainSample], prox: Any,
              scale_of: dict[int, float]) -> tuple[Any, dict]:
        import torch

        from policy.objective import clipped_surrogate, kl_to_reference

        batch = self._tensors(micro, self.lc.shared_prompt)
        logp = self._logprobs(self.engine, batch)
        prox = logp.detach() if prox is None else prox
        per_token, diag = clipped_surrogate(logp, prox, batch["behav"], batch["advantages"],
                                            self.lc.correction, self.lc.clip_eps, self.lc.is_clip,
                                            self.lc.mask_low)
        mask = batch["mask"]
        stats = {"tokens": float(mask.sum()),
                 "clip_frac": float((diag["clipped"] * mask).sum()),
                 "is_weight": float((diag["weight"] * mask).sum()),
                 "masked_frac": float(((1.0 - diag["kept"]) * mask).sum()),
                 "behav_gap": float(((prox - batch["behav"]).abs() * mask).sum())}
        if self.lc.kl_coef > 0:
            with torch.no_grad(), self._reference() as reference:
                ref = self._logprobs(reference, batch)
            kl = kl_to_reference(logp, ref)
            per_token = per_token + self.lc.kl_coef * kl
            stats["kl"] = float((kl.detach() * mask).sum())
        # Each row's token sum times its sample's factor (placeholders: 0); DeepSpeed averages
        # gradients over ranks, so scale up.
        scales = torch.tensor([scale_of.get(id(s), 0.0) for s in micro], dtype=per_token.dtype,
                              device=per_token.device)
        sums = (per_token * mask).sum(-1)
        loss = (sums * scales).sum() * self.world
        stats["loss"] = float(sums.detach().sum())
        return loss, stats

    @contextlib.contextmanager
    def _reference(self) -> Iterator[Any]:
        """The initial policy: the reference model, or with LoRA this one, adapters off."""
        if self.reference is not None:
            yield self.reference
            return
        with self.engine.module.disable_adapter():
            yield self.engine

    def save(self, tag: str, client_state: dict) -> None:
        """Write a checkpoint (model, optimizer, and `client_state`: the learner's
        `policy.checkpoint.LearnerState.to_client()`); keep the newest few
        (`policy.rank_checkpoints`)."""
        self._bind()
        self.checkpoints.save(self.engine, tag, client_state)

    def discard(self, tag: str) -> None:
        """Remove checkpoint `tag` as far as it was written (a save that failed midway)."""
        self.checkpoints.discard(tag)

    def close(self) -> None:
        """Leave the process group (so a later learner in this process can form a new one)."""
        import deepspeed.comm as dist

        self.engine = self.reference = None
        if dist.is_initialized():
            dist.destroy_process_group()

    def weights(self, copy: bool = False) -> list[memoryview] | None:
        """The current weights as bf16 safetensors parts on rank 0 (None elsewhere): with
        LoRA the adapters alone (`policy.lora.encode_adapter`). With `copy`, parts that later
        steps do not change."""
        from policy.weights import encode_parts

        self._bind()
        if self.lc.lora is not None:
            from policy.lora import adapter_state, encode_adapter

            if self.rank != 0:
                return None
            base = self.config.model.path or self.config.model.name
            return encode_adapter(adapter_state(self.engine.module), self.lc.lora, base, copy=copy)
        if self.lc.zero_stage == 3:
            state = self.engine._zero3_consolidated_16bit_state_dict()
        else:
            state = self.engine.module.state_dict()
        return encode_parts(state, copy=copy) if self.rank == 0 else None


def _set_master(module, exact: dict) -> None:
    """Each trainable weight's float32 master copy set to its value in `exact` (the float32
    checkpoint, by parameter name); the bf16 module keeps its rounding of it."""
    from deepspeed.utils import safe_set_full_fp32_param

    for name, param in module.named_parameters():
        if name in exact:
            safe_set_full_fp32_param(param, exact[name].to(param.device))
