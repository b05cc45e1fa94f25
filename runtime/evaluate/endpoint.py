"""Held-out attempts from an OpenAI-compatible endpoint (POST /v1/chat/completions).

Consumes an `Endpoint` (URL, model name, API key, concurrency, timeout), the run config's
`[generator.eval_sampling]` and the tasks; produces one text-only eval `Attempt` per task (no
token ids or logprobs: the judge reads the text). Each prompt is the task's prompt as one user
message; temperature, top_p and max_tokens come from the eval sampling (temperature 0 is
greedy). Stop strings are applied to the answer here as the torch engine applies them (cut at
the first, kept with `include_stop`); they are sent to the server only when it may drop them.
At most `concurrency` requests are in flight; a refused or failed connection, a timeout, HTTP
429 or 5xx are retried with backoff, and what still fails is one `EndpointError` naming the URL
and the cause, which stops the round: no partial result is passed off as whole. Stdlib HTTP.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from urllib.parse import urlsplit

import anyio

from bus.errors import EndpointError
from bus.messages import Attempt, Task, Turn
from envs.evaluation import round_assignment_id
from policy.config import SamplingConfig
from policy.engine import cut_at_stop
from runtime.config import RunConfig

PATH = "/v1/chat/completions"


def chat_url(url: str) -> str:
    """The chat completions URL of `url` (a server root, its `/v1`, or the full path);
    `EndpointError` when it is not an http(s) URL."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise EndpointError(f"--endpoint {url!r}: expected an http(s) URL such as "
                            f"http://127.0.0.1:8000 (the server's root, its /v1, or {PATH})")
    base = url.rstrip("/")
    if base.endswith("/chat/completions"):
        return base
    return base + ("/chat/completions" if base.endswith("/v1") else PATH)


@dataclass(frozen=True)
class Endpoint:
    """Where and how to ask: the chat completions URL, the model name, the key."""

    url: str
    "The full chat completions URL (`chat_url`)."
    model: str
    "The model name the server is asked for."
    api_key: str = ""
    "Sent as `Authorization: Bearer <key>` when set."
    concurrency: int = 8
    "Most requests in flight."
    timeout_s: float = 120.0
    "Longest one request may take."
    retries: int = 2
    "Re-tries of a retryable failure before the round stops."


class _Retryable(Exception):
    """A failure that asking again may cure."""


def request_body(endpoint: Endpoint, sampling: SamplingConfig, prompt: str) -> dict:
    """The request for one task's prompt."""
    body: dict = {"model": endpoint.model, "messages": [{"role": "user", "content": prompt}],
                  "temperature": sampling.temperature, "max_tokens": sampling.max_new_tokens}
    if sampling.temperature > 0:
        body["top_p"] = sampling.top_p
    if sampling.stop and not sampling.include_stop:  # a server drops stop strings it honours
        body["stop"] = list(sampling.stop)
    return body


def answer_of(url: str, body: object, sampling: SamplingConfig) -> tuple[str, str]:
    """(text, finish reason) of a chat completions response, with the stop strings applied."""
    try:
        choice = body["choices"][0]  # type: ignore[index]
        text = choice["message"]["content"] or ""
        finish = str(choice.get("finish_reason") or "")
    except (KeyError, IndexError, TypeError, AttributeError):
        raise EndpointError(f"endpoint {url}: the answer is not a chat completion "
                            f"(no choices[0].message.content): {str(body)[:200]}") from None
    cut = cut_at_stop(text, sampling.stop, sampling.include_stop)
    return cut, "stop" if cut != text else finish


def post(endpoint: Endpoint, body: dict) -> object:
    """One request, blocking (run in a worker thread); the decoded JSON answer."""
    headers = {"Content-Type": "application/json"}
    if endpoint.api_key:
        headers["Authorization"] = f"Bearer {endpoint.api_key}"
    request = urllib.request.Request(endpoint.url, data=json.dumps(body).encode(), headers=headers,
                                     method="POST")
    try:
        with urllib.request.urlopen(request, timeout=endpoint.timeout_s) as response:
            raw = response.read()
    except urllib.error.HTTPError as exc:
        text = exc.read().decode(errors="replace")[:300]
        problem = f"HTTP {exc.code} from {endpoint.url}: {text}"
        if exc.code == 429 or exc.code >= 500:
            raise _Retryable(problem) from None
        hint = {401: "; is the API key right (--api-key-env)?",
                403: "; is the API key right (--api-key-env)?",
                404: f"; is this an OpenAI-compatible server and model {endpoint.model!r} served?"}
        raise EndpointError(problem + hint.get(exc.code, "")) from None
    except (urllib.error.URLError, OSError) as exc:  # refused, reset, DNS, socket timeout
        reason = getattr(exc, "reason", exc)
        raise _Retryable(f"endpoint {endpoint.url} unreachable ({reason}); is the server "
                         "running and --endpoint right?") from None
    try:
        return json.loads(raw)
    except ValueError:
        raise EndpointError(f"endpoint {endpoint.url}: the answer is not JSON: "
                            f"{raw[:200]!r}") from None


async def ask(endpoint: Endpoint, body: dict) -> object:
    """The answer to `body`, re-asking a retryable failure `retries` times with backoff."""
    problem = ""
    for attempt in range(endpoint.retries + 1):
        if attempt:
            await anyio.sleep(min(0.5 * 2 ** (attempt - 1), 5.0))
        try:
            with anyio.fail_after(endpoint.timeout_s + 5):
                return await anyio.to_thread.run_sync(post, endpoint, body, abandon_on_cancel=True)
        except _Retryable as exc:
            problem = str(exc)
        except TimeoutError:
            problem = f"no answer from {endpoint.url} within {endpoint.timeout_s:g} s"
    raise EndpointError(f"{problem} (after {endpoint.retries + 1} tries)")


@dataclass(frozen=True)
class EndpointSampler:
    """Held-out attempts from an endpoint."""

    endpoint: Endpoint

    def describe(self) -> dict[str, str]:
        """What was evaluated, for the record."""
        return {"kind": "endpoint", "url": self.endpoint.url, "name": self.endpoint.model}

    async def sample(self, cfg: RunConfig, tasks: list[Task], label: str) -> list[Attempt]:
        """One attempt per task, in task order; `EndpointError` stops them all."""
        sampling = cfg.generator.eval_sampling
        attempts: list[Attempt | None] = [None] * len(tasks)
        holding = anyio.Semaphore(self.endpoint.concurrency)
        failed: list[EndpointError] = []

        async def one(i: int, task: Task) -> None:
            async with holding:
                try:
                    body = await ask(self.endpoint, request_body(self.endpoint, sampling, task.prompt))
                    text, finish = answer_of(self.endpoint.url, body, sampling)
                except EndpointError as exc:
                    failed.append(exc)
                    work.cancel_scope.cancel()
                    return
            group = round_assignment_id(label, 0, i)
            turn = Turn(prompt_ids=b"", completion_ids=b"", logprobs=b"", completion=text,
                        policy_version=0, generator=f"endpoint:{self.endpoint.model}",
                        finish_reason=finish)
            attempts[i] = Attempt(attempt_id=f"{group}.0", group_id=group, index=0, group_size=1,
                                  task=task, turns=[turn], policy_version=0, purpose="eval")

        async with anyio.create_task_group() as work:
            for i, task in enumerate(tasks):
                work.start_soon(one, i, task)
        if failed:
            raise failed[0]
        return [a for a in attempts if a is not None]

    async def episodes(self, cfg: RunConfig, tasks: list[Task], label: str,
                       max_turns: int) -> list:
        """Not served: an endpoint answers single-turn tasks only."""
        domains = ", ".join(sorted({t.domain for t in tasks}))
        raise EndpointError(f"--endpoint evaluates single-turn tasks only; {domains} "
                            "runs tool episodes: evaluate a model folder, or leave it out with --env")
