"""The warm start: demonstrations as the generator's token contexts with a loss mask on the
assistant's tokens, the learner's SFT step on the tiny model, and `whet sft`.

The contexts are checked against the real generator on a real bus, whose engine replays the
demonstration's assistant turns through the real sampling loop (stop strings included).
"""

from __future__ import annotations

import json
import os

import anyio
import msgspec
import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from actors.generator import Generator, context_of
from bus import subjects
from bus.codec import unpack_ids
from bus.messages import Attempt, Demo, DemoMessage, Task, TaskAssignment, Verifier
from judging.tools import is_tool_task
from policy.chat import char_chat_format, hf_chat_format
from policy.config import ModelConfig, WarmstartConfig
from policy.engine import BatchingEngine, RowSettings
from policy.follower import WeightFollower
from policy.sampling import sample_rows
from policy.sft import demo_ids, demo_rows, sft_batches
from runtime.cli.main import app
from tests.conftest import until
from tests.test_learner import tiny_run_config

os.environ.setdefault("OMP_NUM_THREADS", "1")
torch.set_num_threads(1)
STOP = "</tool_call>"
EPISODE = [
    ("user", "Fix the bug in shop/cart.py so the visible tests pass, then submit."),
    ("assistant", '<tool_call>{"name": "read_file", "arguments": {"path": "shop/cart.py"}}' + STOP),
    ("tool", "def total(items):\n    return sum(i.price for i in items[1:])\n"),
    ("assistant", '<tool_call>{"name": "write_file", "arguments": {"path": "shop/cart.py", '
                  '"content": "def total(items):\\n    return sum(i.price for i in items)\\n"}}'
     + STOP),
    ("tool", "wrote shop/cart.py (2 lines)"),
    ("assistant", '<tool_call>{"name": "submit", "arguments": {}}' + STOP),
]


def demo(messages=EPISODE, task_id: str = "repository/1") -> Demo:
    return Demo(task_id=task_id, env="repository", domain="repository", split="train", level=0,
                messages=[DemoMessage(role=r, content=c) for r, c in messages],
                source="scripted")


def answer(n: int) -> Demo:
    """A single-turn demonstration: a prompt and a short reference answer."""
    return demo([("user", f"Write f returning {n}."),
                 ("assistant", f"```python\ndef f():\n    return {n}\n```")], f"python/{n}")


def tiny_tokenizer():
    from policy.model import load_tokenizer

    return load_tokenizer(ModelConfig(name="tiny"))


@pytest.mark.unit
def test_mask_covers_the_assistant_tokens_and_the_end_of_the_last_turn_only():
    """Masked-in tokens decode to the assistant messages alone; a turn cut at a stop string
    leaves its end token to the next context, the last turn trains its own."""
    chat = char_chat_format(48)
    ids, trained = demo_ids(demo([("user", "q"), ("assistant", "ab"), ("tool", "t"),
                                  ("assistant", "cd"), ("user", "u"), ("assistant", "ef:")]),
                            chat, stops=[":"])
    text = chat.render([{"role": "user", "content": "q"}], True)
    assert chat.decode(ids) == (text + "ab[t]t[a]cd[u]u[a]ef:").replace("|", "")
    picked = "".join("|" if i == 0 else chat.decode([i]) for i, t in zip(ids, trained) if t)
    # "ab" and "cd" end without a stop string: the model closes them; "ef:" is the last.
    assert picked == "ab|cd|ef:|"
    assert sum(trained) == len(picked)


@pytest.mark.unit
def test_conversations_the_generator_cannot_sample_are_refused_naming_the_demo():
    """Starting with the assistant, ending on a tool result, or a stop string mid-message."""
    chat = char_chat_format(48)
    for messages, words in ([("assistant", "a")], "start with a user"), \
            ([("user", "q"), ("assistant", "a"), ("tool", "t")], "ends with a tool"), \
            ([("user", "q"), ("assistant", "a:b")], "before its end"):
        with pytest.raises(ValueError, match=words) as raised:
            demo_ids(demo(messages, "bad/1"), chat, stops=[":"])
        assert "demo bad/1" in str(raised.value)


@pytest.mark.unit
def test_batches_cover_each_demo_once_an_epoch_and_rows_too_long_are_counted():
    """Two epochs of 5 rows in batches of 4: 3 batches, each row twice; max_len leaves out."""
    chat = char_chat_format(48)
    rows = demo_rows([answer(n) for n in range(5)] + [demo()], chat, [STOP], max_len=200)
    assert rows.too_long == ["repository/1"] and len(rows.samples) == 5
    batches = sft_batches(rows.samples, 4, 2.0, seed=3)
    assert [len(b) for b in batches] == [4, 4, 2]
    seen = [s.verdict_id for b in batches for s in b]
    assert sorted(seen) == sorted([f"python/{n}" for n in range(5)] * 2)


@pytest.mark.bus
def test_turnwise_ids_are_the_chat_template_of_the_whole_conversation_but_its_last_newline():
    """SmolLM2's template renders the episode to the same tokens as the turn-wise ids, except
    the newline it writes after the last end token (the model stops at the end token)."""
    tokenizer = tiny_tokenizer()
    ids, trained = demo_ids(demo(), hf_chat_format(tokenizer), [STOP])
    whole = tokenizer.apply_chat_template([{"role": r, "content": c} for r, c in EPISODE],
                                          tokenize=False)
    assert whole.endswith("<|im_end|>\n")
    assert ids == tokenizer.encode(whole, add_special_tokens=False)[:-1]
    assert ids[-1] == tokenizer.eos_token_id and trained[-1]


class ScriptedEngine(BatchingEngine):
    """Replays given completions through the real sampling loop: each forward puts all the
    probability on the script's next token (the end token once it runs out)."""

    def __init__(self, chat, vocab: int, scripts: list[list[int]]) -> None:
        super().__init__(chat, max_batch=1, max_waiting=4)
        self.vocab, self.scripts = vocab, list(scripts)
        self.end = min(chat.end_ids)

    def run_rows(self, contexts: list[list[int]], settings: list[RowSettings]) -> list:
        script = self.scripts.pop(0)

        def forward(ids, mask, positions, step):
            step = step or 0
            logits = torch.full((1, self.vocab), -1e9)
            logits[0, script[step] if step < len(script) else self.end] = 0.0
            return logits, step + 1

        return sample_rows(forward, contexts, settings, self.chat, 0)

    def apply_weights(self, blob) -> None:
        pass


def repository_task() -> Task:
    return Task(task_id="repository/1", env="repository", env_version="1", domain="repository",
                prompt=EPISODE[0][1], verifier=Verifier(kind="repo_io"))


async def latest_attempt(bus, turns: int) -> Attempt:
    got: list[Attempt] = []

    async def stored() -> bool:
        got[:] = [m for _, m in await bus.snapshot(subjects.STREAM_ATTEMPTS, Attempt)
                  if len(m.turns) == turns]
        return bool(got)

    await until(stored, 30, f"an attempt of {turns} turns on the attempts stream")
    return got[0]


@pytest.mark.bus
async def test_ids_equal_the_context_the_generator_builds_for_the_same_episode(bus, tmp_path):
    """The generator samples the episode's assistant turns (cut at the stop string) and
    continues with its tool results: its context is the demo's ids but the last end token,
    which sampling never reaches after a stop string; the mask is its completion tokens."""
    tokenizer = tiny_tokenizer()
    chat = hf_chat_format(tokenizer)
    ids, trained = demo_ids(demo(), chat, [STOP])
    spans, run = [], []
    for i, t in zip(ids, trained):
        if t:
            run.append(i)
        elif run:
            spans.append(run)
            run = []
    spans.append(run)
    assert len(spans) == 3
    cfg = tiny_run_config(tmp_path)
    sampling = msgspec.structs.replace(cfg.generator.sampling, max_new_tokens=200, stop=[STOP])
    cfg = msgspec.structs.replace(cfg, generator=msgspec.structs.replace(cfg.generator,
                                                                         sampling=sampling))
    engine = ScriptedEngine(chat, len(tokenizer), spans)
    gen = Generator(bus, cfg, engine, WeightFollower(bus, engine))
    task = repository_task()
    assert is_tool_task(task)
    async with anyio.create_task_group() as tg:
        await tg.start(engine.serve)
        await gen.on_assignment(TaskAssignment(assignment_id="a", task=task, group_size=1,
                                               admitted_version=0), None)
        for turn, (_, result) in zip((1, 2), (EPISODE[2], EPISODE[4])):
            attempt = await latest_attempt(bus, turn)
            last = msgspec.structs.replace(attempt.turns[-1], feedback=result)
            await gen.on_continuation(msgspec.structs.replace(
                attempt, turns=[*attempt.turns[:-1], last]), None)
        final = await latest_attempt(bus, 3)
        tg.cancel_scope.cancel()
    assert [t.finish_reason for t in final.turns] == ["stop"] * 3
    assert context_of(final) == ids[:-1]
    sampled = np.concatenate([np.r_[np.zeros(len(unpack_ids(t.prompt_ids)), bool),
                                    np.ones(len(unpack_ids(t.completion_ids)), bool)]
                              for t in final.turns])
    assert sampled.tolist() == trained[:-1]


def demos_file(tmp_path, demos) -> str:
    path = tmp_path / "demos.jsonl"
    path.write_text("".join(msgspec.json.encode(d).decode() + "\n" for d in demos))
    return str(path)


def tiny_config_file(tmp_path) -> str:
    path = tmp_path / "tiny.toml"
    path.write_text('[model]\nname = "tiny"\n[learner]\nmicro_batch_size = 4\n'
                    '[generator.sampling]\nstop = ["</tool_call>"]\n')
    return str(path)


@pytest.mark.bus
async def test_sft_steps_lower_the_masked_loss_on_the_demos(tmp_path):
    """Six steps at lr 1e-2 on 4 demos (one tool episode, three answers) through the
    learner's ranks lower their masked token-mean loss by more than a tenth."""
    from policy.ranks import RankGroup
    from policy.warmstart import sft_trainer_config

    rows = demo_rows([demo()] + [answer(n) for n in range(3)],
                     hf_chat_format(tiny_tokenizer()), [STOP], 4096).samples
    config = sft_trainer_config(tiny_run_config(tmp_path).trainer, WarmstartConfig(lr=1e-2),
                                tmp_path / "out")
    group = RankGroup(config, tmp_path / "out" / "checkpoint")
    await group.start()
    try:
        before = await group.call("sft_loss", rows)
        steps = [(await group.call("sft_step", rows))["loss"] for _ in range(6)]
        after = await group.call("sft_loss", rows)
    finally:
        await group.close()
    assert steps[0] == pytest.approx(before, rel=1e-4)
    assert after < before * 0.9


@pytest.mark.bus
def test_targets_at_masked_positions_do_not_change_the_loss():
    """Under the tiny model's logits, rewriting the targets inside the tool results leaves
    the masked loss as it was; rewriting one assistant target changes it."""
    from policy.batch import collate
    from policy.model import load_model
    from policy.objective import masked_nll

    [row] = demo_rows([demo()], hf_chat_format(tiny_tokenizer()), [STOP], 4096).samples
    batch = {k: torch.from_numpy(v) for k, v in collate([row], 0).items()}
    with torch.no_grad():
        logits = load_model(ModelConfig(name="tiny"))(input_ids=batch["input_ids"]).logits[:, :-1]
    base = masked_nll(logits, batch["targets"], batch["mask"])
    context = np.flatnonzero(batch["mask"][0].numpy() == 0)
    tool = batch["targets"].clone()
    tool[0, context[len(context) // 2:]] = 42
    assert not torch.equal(tool, batch["targets"])
    assert masked_nll(logits, tool, batch["mask"]) == base
    own = batch["targets"].clone()
    first = int(np.flatnonzero(batch["mask"][0].numpy() == 1)[0])
    own[0, first] = 42 if own[0, first] != 42 else 43
    assert masked_nll(logits, own, batch["mask"]) != base


def run_cli(*args: str):
    return CliRunner().invoke(app, ["sft", *args])


@pytest.mark.bus
def test_whet_sft_writes_a_model_transformers_loads_and_generates_from(tmp_path):
    """`whet sft` on 4 demos writes model/ (loads, generates), checkpoint/ and sft.json
    (steps, demos used and left out, loss per step, seconds); a demo over max_len is counted."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    demos = demos_file(tmp_path, [demo()] + [answer(n) for n in range(3)])
    config = tiny_config_file(tmp_path)
    with open(config, "a") as f:
        f.write("[warmstart]\nmax_len = 100\n")
    out = tmp_path / "sft"
    result = run_cli(demos, "--config", config, "--out", str(out), "--epochs", "2",
                     "--lr", "1e-3", "--batch-size", "2")
    assert result.exit_code == 0, result.output
    assert "3 demos" in result.output and "3 steps" in result.output
    report = json.loads((out / "sft.json").read_text())
    assert report["steps"] == 3 and report["demos_used"] == 3
    assert report["left_out_too_long"] == ["repository/1"] and len(report["loss"]) == 3
    assert report["wall_s"] > 0 and report["cpu_s"] > 0 and report["lr"] == 1e-3
    assert (out / "checkpoint" / "latest").read_text() == report["checkpoint"]
    model = AutoModelForCausalLM.from_pretrained(out / "model", dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(out / "model")
    ids = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}],
                                        add_generation_prompt=True, return_tensors="pt")
    ids = ids if isinstance(ids, torch.Tensor) else ids["input_ids"]
    assert model.generate(ids, max_new_tokens=3, do_sample=False).shape[1] == ids.shape[1] + 3
    again = run_cli(demos, "--config", config, "--out", str(out))
    assert again.exit_code == 2 and "holds a checkpoint already" in again.output


@pytest.mark.unit
def test_whet_sft_bad_input_is_one_line_and_exit_2(tmp_path):
    """A missing demos file, a bad record (naming its line) and a bad --lr exit 2."""
    config = tiny_config_file(tmp_path)
    out = str(tmp_path / "out")
    missing = run_cli(str(tmp_path / "none.jsonl"), "--config", config, "--out", out)
    assert missing.exit_code == 2 and "cannot read" in missing.output
    bad = tmp_path / "bad.jsonl"
    bad.write_text(msgspec.json.encode(answer(1)).decode() + "\n{\"task_id\": 3}\n")
    record = run_cli(str(bad), "--config", config, "--out", out)
    assert record.exit_code == 2 and "bad.jsonl:2" in record.output
    assert len(record.output.strip().splitlines()) == 1
    lr = run_cli(demos_file(tmp_path, [answer(1)]), "--config", config, "--out", out,
                 "--lr", "-1")
    assert lr.exit_code == 2 and "lr" in lr.output
    assert not (tmp_path / "out").exists()


def warm_run(tmp_path, demos: str, more: str = ""):
    """A tiny run's config with the warm start on (and `more` [warmstart] lines), and a
    fresh run directory for it."""
    from runtime.config import load
    from runtime.stack.rundir import RunDir

    config = tiny_config_file(tmp_path)
    with open(config, "a") as f:
        f.write(f'[warmstart]\nenabled = true\ndemos = "{demos}"\nlr = 1e-2\nbatch_size = 2\n'
                + more)
    run = tmp_path / "runs" / "r1"
    run.mkdir(parents=True)
    return load(config), RunDir(run.resolve())


@pytest.mark.bus
def test_the_warmstart_stage_trains_once_and_points_the_rl_stage_at_its_model(tmp_path):
    """With [warmstart] enabled the run's config leaves with [model] path at
    <run>/warmstart/model (in the resolved config the actors read too), one warmstart.done
    event names its steps and losses, and a second call trains nothing."""
    from runtime import log as log_mod
    from runtime.config import load
    from runtime.stack import warmstart

    cfg, rd = warm_run(tmp_path, demos_file(tmp_path, [answer(n) for n in range(4)]))
    log_mod.configure(kind="supervisor", instance="supervisor", run_id="r1", run_dir=rd.path,
                      console=False)
    rl = warmstart.prepare(cfg, rd)
    model = rd.path / "warmstart" / "model"
    assert rl.model.path == str(model) and (model / "config.json").is_file()
    assert load(rd.config_file).model.path == str(model)
    events = [json.loads(line) for line in (rd.path / "logs" / "supervisor.jsonl").open()]
    [done] = [e for e in events if e["event"] == "warmstart.done"]
    report = json.loads((rd.path / "warmstart" / "sft.json").read_text())
    assert done["fields"]["steps"] == report["steps"] == 2
    assert done["fields"]["loss_first"] == report["loss"][0]
    assert done["fields"]["loss_last"] == report["loss"][-1] and done["fields"]["seconds"] > 0
    stage = json.loads((rd.path / "warmstart" / "stage.json").read_text())
    assert stage["demos"] == 4 and stage["cpu_s"] >= stage["sft_cpu_s"] > 0
    assert done["fields"]["stage_cpu_s"] == stage["cpu_s"]
    stamp = (rd.path / "warmstart" / "sft.json").stat().st_mtime_ns
    assert warmstart.prepare(cfg, rd).model.path == str(model)
    assert (rd.path / "warmstart" / "sft.json").stat().st_mtime_ns == stamp


@pytest.mark.bus
def test_an_undemonstrated_rl_pool_leaves_the_demonstrated_tasks_out(tmp_path):
    """With rl_pool = "undemonstrated" the RL stage's config (and the resolved config the
    sampler reads) sets [envs] skip_ids at the demonstrated tasks' ids; once that list is
    gone, a restarted run says how to recover instead of training on them."""
    from bus.errors import RunError
    from envs.taskfile import read_ids
    from runtime.config import load
    from runtime.stack import warmstart

    cfg, rd = warm_run(tmp_path, demos_file(tmp_path, [answer(n) for n in (1, 2, 2)]),
                       'rl_pool = "undemonstrated"\n')
    rl = warmstart.prepare(cfg, rd)
    assert set(read_ids(rl.envs.skip_ids)) == {"python/1", "python/2"}
    assert load(rd.config_file).envs.skip_ids == rl.envs.skip_ids
    (rd.path / "warmstart" / warmstart.DEMONSTRATED).unlink()
    with pytest.raises(RunError, match="demonstrated.txt: missing"):
        warmstart.prepare(cfg, rd)
