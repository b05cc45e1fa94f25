"""Batched autoregressive sampling with temperature, top-p, stop sequences and logprobs.

Consumes a `forward` function (token ids in, next-token logits out, with whatever cache it
keeps), the contexts and each row's sampling settings; produces, per row, the sampled ids,
the log-probability of each under the distribution it was drawn from, the text and why it
stopped. The torch engine passes a transformers model's forward; the fake engine passes
uniform logits. It loads no model and knows no bus.

The logprob of a sampled token is taken from the distribution actually sampled: the
softmax of logits / temperature, restricted to the top-p nucleus and renormalised. For a
greedy row (temperature 0) it is the untempered model logprob of the argmax. A row ended
by a stop string with `end_token_at_stop` takes one more step: the end-of-turn token, not
drawn but appended, with its logprob under the tempered softmax (no nucleus).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Callable, Sequence

import torch

from policy.chat import ChatFormat
from policy.engine import RowSettings, cut_at_stop

Forward = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, object], tuple[torch.Tensor, object]]
"(input_ids [B,T], attention_mask [B,T+past], position_ids [B,T], cache) -> (logits [B,V], cache)"

Prefill = Callable[[list[list[int]]], tuple[torch.Tensor, torch.Tensor, object]]
"contexts -> (each row's next-token logits [B,V], attention mask over the cache [B,W], cache)"


@dataclass
class RowResult:
    """What one row produced."""

    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    text: str = ""
    finish_reason: str = ""


def choose_tokens(logits: torch.Tensor, temperature: torch.Tensor, top_p: torch.Tensor,
                  generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Pick one token per row; returns (token ids [B], their logprobs [B]).

    `temperature` and `top_p` are per row ([B]); temperature 0 means greedy.
    """
    logits = logits.float()
    greedy = temperature <= 0
    safe_t = torch.where(greedy, torch.ones_like(temperature), temperature)
    logp = torch.log_softmax(logits / safe_t[:, None], dim=-1)
    probs = logp.exp()
    if bool((top_p >= 1).all()):
        nucleus, nucleus_logp = probs, logp
    else:
        nucleus, nucleus_logp = _nucleus(probs, top_p)
    drawn = torch.multinomial(nucleus, 1, generator=generator).squeeze(-1)
    argmax = logits.argmax(dim=-1)
    tokens = torch.where(greedy, argmax, drawn)
    chosen = torch.where(greedy, logp.gather(-1, argmax[:, None]).squeeze(-1),
                         nucleus_logp.gather(-1, drawn[:, None]).squeeze(-1))
    return tokens, chosen


def _nucleus(probs: torch.Tensor, top_p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Probabilities restricted to each row's top-p nucleus and renormalised, and their logs."""
    sorted_p, order = probs.sort(dim=-1, descending=True)
    before = sorted_p.cumsum(dim=-1) - sorted_p
    keep_sorted = before < top_p[:, None]
    keep_sorted[:, 0] = True
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    nucleus = torch.where(keep, probs, torch.zeros_like(probs))
    nucleus = nucleus / nucleus.sum(dim=-1, keepdim=True)
    return nucleus, torch.log(nucleus)


def _stopped_by(text_tail: str, stops: Sequence[str]) -> bool:
    return any(s and s in text_tail for s in stops)


def padded_prefill(forward: Forward, contexts: list[list[int]], pad_id: int,
                   device: str = "cpu") -> tuple[torch.Tensor, torch.Tensor, object]:
    """All contexts in one left-padded forward pass from an empty cache (a `Prefill`)."""
    rows = len(contexts)
    width = max(len(c) for c in contexts)
    ids = torch.full((rows, width), pad_id, dtype=torch.long)
    mask = torch.zeros((rows, width), dtype=torch.long)
    for r, ctx in enumerate(contexts):
        ids[r, width - len(ctx):] = torch.tensor(ctx, dtype=torch.long)
        mask[r, width - len(ctx):] = 1
    ids, mask = ids.to(device), mask.to(device)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    logits, cache = forward(ids, mask, positions, None)
    return logits, mask, cache


Select = Callable[[object, torch.Tensor], object]
"(cache, batch rows to keep [K]) -> the cache of those rows alone"


def sample_rows(forward: Forward, contexts: list[list[int]], settings: list[RowSettings],
                chat: ChatFormat, pad_id: int, generator: torch.Generator | None = None,
                device: str = "cpu", prefill: Prefill | None = None,
                select: Select | None = None) -> list[RowResult]:
    """Sample a completion for each context, all rows decoded in one batch. `prefill` (default:
    `padded_prefill`) reads the contexts; the masked-out columns of its cache are padding.
    `select` given, rows that finished leave the batch once they are a quarter of it, so the
    rest decode without them; else they stay to the end, fed padding (the cache then holds
    every row, as a caller that keeps it needs)."""
    rows = len(contexts)
    prefill = prefill or partial(padded_prefill, forward, pad_id=pad_id, device=device)
    logits, mask, cache = prefill(contexts)
    temperature = torch.tensor([s.temperature for s in settings], device=device)
    top_p = torch.tensor([s.top_p for s in settings], device=device)
    results = [RowResult() for _ in range(rows)]
    index = list(range(rows))  # the result row of each batch row
    active = torch.ones(rows, dtype=torch.bool)  # by batch row
    last_pos = mask.sum(-1, keepdim=True) - 1
    owed: set[int] = set()  # result rows ended by a stop string, owed the end token
    for step in range(max(s.max_new_tokens for s in settings)):
        tokens, logps = choose_tokens(logits, temperature, top_p, generator)
        tokens_cpu, logps_cpu = tokens.cpu().tolist(), logps.cpu().tolist()
        for b, r in enumerate(index):
            if not active[b]:
                continue
            if r in owed:
                owed.discard(r)
                _close(results[r], logits[b], float(temperature[b]), chat)
            else:
                _advance(results[r], settings[r], tokens_cpu[b], logps_cpu[b], chat)
                if _owes_end(results[r], settings[r], chat):
                    results[r].finish_reason = ""
                    owed.add(r)
            active[b] = not results[r].finish_reason
        if not active.any():
            break
        if select is not None and 4 * int(active.sum()) <= 3 * len(index):
            keep = active.nonzero().squeeze(-1)
            index = [index[b] for b in keep.tolist()]
            at = keep.to(device)
            tokens, mask, last_pos = tokens[at], mask[at], last_pos[at]
            temperature, top_p = temperature[at], top_p[at]
            cache, active = select(cache, at), active[keep]
        feed = torch.where(active.to(device), tokens, torch.full_like(tokens, pad_id))
        mask = torch.cat([mask, active.to(device, torch.long)[:, None]], dim=-1)
        last_pos = last_pos + 1
        logits, cache = forward(feed[:, None], mask, last_pos, cache)
    for result, setting in zip(results, settings):
        result.text = cut_at_stop(chat.decode(result.token_ids), setting.stop,
                                  setting.include_stop)
    return results


def _advance(result: RowResult, setting: RowSettings, token: int, logp: float,
             chat: ChatFormat) -> None:
    result.token_ids.append(token)
    result.logprobs.append(logp)
    if token in chat.end_ids:
        result.finish_reason = "stop"
    elif setting.stop and _stopped_by(chat.decode(result.token_ids[-_tail_tokens(setting):]),
                                      setting.stop):
        result.finish_reason = "stop"
    elif len(result.token_ids) >= setting.max_new_tokens:
        result.finish_reason = "length"


def _owes_end(result: RowResult, setting: RowSettings, chat: ChatFormat) -> bool:
    """Whether a row just ended by a stop string takes the end token (it has room for it)."""
    return (setting.end_token_at_stop and result.finish_reason == "stop"
            and result.token_ids[-1] not in chat.end_ids
            and len(result.token_ids) < setting.max_new_tokens)


def _close(result: RowResult, logits: torch.Tensor, temperature: float,
           chat: ChatFormat) -> None:
    """Append the end-of-turn token with its logprob under the tempered softmax."""
    end = min(chat.end_ids)
    scaled = logits.float() / (temperature if temperature > 0 else 1.0)
    result.token_ids.append(end)
    result.logprobs.append(float(torch.log_softmax(scaled, dim=-1)[end]))
    result.finish_reason = "stop"


def _tail_tokens(setting: RowSettings) -> int:
    # Every token decodes to at least one character (special ones aside), so the last
    # len(longest stop) + 2 tokens are enough to see a stop string that just completed.
    return max(len(s) for s in setting.stop) + 2
