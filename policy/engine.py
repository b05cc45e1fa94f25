"""The generation engine interface, and the batching loop the CPU engines share.

Consumes sample requests (a context of token ids, how many samples, how to sample) and
weight versions; produces `Sample`s stamped with the policy version that made them. The
engines implement it (`policy.engines` lists them and opens the configured one); this module
imports none of them, and no torch. Weights arrive as safetensors bytes (or None: the model's
own version-0 weights) and are swapped only between batches: a batch never mixes versions.
An engine that `pins` also holds copies fixed at a version (`pin`, the newest two kept), which
rows naming that version sample from while the live weights move on: a held-out round holds
no one up.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any, Sequence

import anyio
import anyio.abc
import structlog

from policy.chat import ChatFormat
from policy.config import SamplingConfig

log = structlog.get_logger("policy.engine")


@dataclass(frozen=True)
class RowSettings:
    """How one sequence is sampled."""

    temperature: float
    top_p: float
    max_new_tokens: int
    stop: tuple[str, ...] = ()
    include_stop: bool = False
    "The text keeps the stop string that ended it."
    dtype: str = ""
    "Weights dtype to sample with ('' for the engine's own); rows of one batch share it."
    pinned: int = -1
    "Sample from the copy pinned at this version (`Engine.pin`); -1: the live weights."
    end_token_at_stop: bool = False
    "A row ended by a stop string gets the end-of-turn token too (`SamplingConfig`)."

    @classmethod
    def of(cls, cfg: SamplingConfig, room: int | None = None,
           pinned: int = -1) -> "RowSettings":
        """Settings from config, with max_new_tokens cut to the `room` left in the context."""
        most = cfg.max_new_tokens if room is None else max(1, min(cfg.max_new_tokens, room))
        return cls(cfg.temperature, cfg.top_p, most, tuple(cfg.stop), cfg.include_stop,
                   cfg.dtype, pinned, cfg.end_token_at_stop)


def cut_at_stop(text: str, stops: Sequence[str], include: bool = False) -> str:
    """`text` up to the first stop string in it (through it when `include`), else all of it."""
    cuts = [text.index(s) + (len(s) if include else 0) for s in stops if s and s in text]
    return text[:min(cuts)] if cuts else text


@dataclass(frozen=True)
class SampleRequest:
    """Sample `n` independent completions of `context`."""

    context: list[int]
    n: int
    settings: RowSettings


@dataclass
class Sample:
    """One sampled completion."""

    token_ids: list[int]
    logprobs: list[float]
    text: str
    finish_reason: str
    policy_version: int


class Engine(abc.ABC):
    """A policy that samples. Run `serve` in a task group; then `generate` and `load_weights`."""

    chat: ChatFormat
    version: int = 0
    "Policy version of the weights running now."
    pins = False
    "Whether `pin` is supported: rows can sample a fixed version while the live one moves on."
    threads: int = 0
    "CPU threads a batch may use (0: as the process started); raised once training is over."
    KEEP_PINNED = 2
    "Pinned copies kept (the newest versions): a round that overlaps the next keeps its own."

    @abc.abstractmethod
    async def serve(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Run until cancelled."""

    @abc.abstractmethod
    async def generate(self, request: SampleRequest) -> list[Sample]:
        """The `n` samples of `request`, once sampled."""

    @abc.abstractmethod
    async def load_weights(self, version: int, blob: bytes | bytearray | None) -> None:
        """Run `version` (safetensors bytes, or None for the version-0 weights) from the
        next batch on; returns once it runs."""

    async def pin(self, version: int, blob: bytes | bytearray | None, dtype: str = "") -> None:
        """Hold a copy of `version` (safetensors bytes, or None for the version-0 weights) in
        `dtype` ('' for the engine's own) for rows that name it; only where `pins`."""
        raise NotImplementedError(f"{type(self).__name__} cannot pin a version")

    @property
    def pinned_versions(self) -> set[int]:
        """Versions held in pinned copies."""
        return set()

    @property
    def stats(self) -> dict[str, float]:
        """Gauges for the heartbeat."""
        return {}


@dataclass
class _Pending:
    request: SampleRequest
    done: anyio.Event = field(default_factory=anyio.Event)
    samples: list[Sample] = field(default_factory=list)
    error: BaseException | None = None


class BatchingEngine(Engine):
    """Collects requests into batches of at most `max_batch` rows and runs each batch in a
    worker thread; weights are swapped under the same lock, so never inside a batch."""

    def __init__(self, chat: ChatFormat, max_batch: int, max_waiting: int) -> None:
        self.chat = chat
        self.max_batch = max_batch
        self._send, self._receive = anyio.create_memory_object_stream[_Pending](max_waiting)
        self._lock = anyio.Lock()
        self._tokens = 0
        self._busy_s = 0.0
        self._pinned: list[int] = []

    @abc.abstractmethod
    def run_rows(self, contexts: list[list[int]], settings: list[RowSettings]) -> list[Any]:
        """Sample one completion per context (blocking); returns `policy.sampling.RowResult`s."""

    @abc.abstractmethod
    def apply_weights(self, blob: bytes | bytearray | None) -> None:
        """Install weights (blocking); called with no batch running."""

    def apply_pinned(self, version: int, blob: bytes | bytearray | None, dtype: str) -> None:
        """Make a pinned copy of `version` (blocking); only where `pins`."""
        raise NotImplementedError(f"{type(self).__name__} cannot pin a version")

    def drop_pinned(self, version: int) -> None:
        """Free the pinned copy of `version` (blocking)."""

    async def generate(self, request: SampleRequest) -> list[Sample]:
        pending = _Pending(request)
        await self._send.send(pending)
        await pending.done.wait()
        if pending.error is not None:
            raise pending.error
        return pending.samples

    async def load_weights(self, version: int, blob: bytes | bytearray | None) -> None:
        async with self._lock:
            await anyio.to_thread.run_sync(self.apply_weights, blob)
            self.version = version

    async def pin(self, version: int, blob: bytes | bytearray | None, dtype: str = "") -> None:
        if not self.pins:
            await super().pin(version, blob, dtype)
        async with self._lock:
            await anyio.to_thread.run_sync(self.apply_pinned, version, blob, dtype)
            self._pinned.append(version)
            while len(self._pinned) > self.KEEP_PINNED:
                self.drop_pinned(self._pinned.pop(0))

    @property
    def pinned_versions(self) -> set[int]:
        return set(self._pinned)

    async def serve(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        async with self._receive:
            while True:
                batch = [await self._receive.receive()]
                with anyio.move_on_after(0.02):  # let requests that arrive together share a batch
                    while sum(p.request.n for p in batch) < self.max_batch:
                        batch.append(await self._receive.receive())
                async with self._lock:
                    await self._run(batch)

    async def _run(self, batch: list[_Pending]) -> None:
        # Rows sampled in another dtype (eval in float32), or from the pinned copy, never share
        # a batch with the rest.
        by_weights: dict[tuple[str, bool], list[tuple[_Pending, int]]] = {}
        for p in batch:
            key = (p.request.settings.dtype, p.request.settings.pinned)
            by_weights.setdefault(key, []).extend((p, i) for i in range(p.request.n))
        chunks = [rows[s:s + self.max_batch] for rows in by_weights.values()
                  for s in range(0, len(rows), self.max_batch)]
        try:
            for chunk in chunks:
                settings = chunk[0][0].request.settings
                version = self.version if settings.pinned < 0 else settings.pinned
                if settings.pinned >= 0 and settings.pinned not in self._pinned:
                    raise RuntimeError(f"rows name version {settings.pinned}, which is not pinned "
                                       f"(pinned: {self._pinned})")
                began = anyio.current_time()
                results = await anyio.to_thread.run_sync(
                    self.run_rows, [p.request.context for p, _ in chunk],
                    [p.request.settings for p, _ in chunk])
                self._account(results, anyio.current_time() - began, version,
                              settings.dtype)
                for (pending, _), r in zip(chunk, results):
                    pending.samples.append(Sample(r.token_ids, r.logprobs, r.text,
                                                  r.finish_reason, version))
        except Exception as exc:  # noqa: BLE001 - handed to each waiting caller
            for pending in batch:
                pending.error = exc
        finally:
            for pending in batch:
                pending.done.set()

    def _account(self, results: list[Any], seconds: float, version: int, dtype: str = "") -> None:
        tokens = sum(len(r.token_ids) for r in results)
        self._tokens += tokens
        self._busy_s += seconds
        log.info("generator.batch_completed", sequences=len(results), tokens=tokens,
                 seconds=round(seconds, 3), tokens_per_s=round(tokens / max(seconds, 1e-9), 1),
                 policy_version=version, dtype=dtype or "engine")

    @property
    def stats(self) -> dict[str, float]:
        rate = self._tokens / self._busy_s if self._busy_s else 0.0
        return {"tokens": float(self._tokens), "tokens_per_s": round(rate, 1)}


def room_left(context_len: int, max_context: int) -> int:
    """Tokens a completion may still add to a context of `context_len`."""
    return max(0, max_context - context_len)
