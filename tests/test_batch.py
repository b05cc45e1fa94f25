"""From verdicts to training samples, as pure functions: trajectories, groups, filters,
and the token choice of the sampler."""

from __future__ import annotations

import math

import pytest
import torch

from bus.codec import pack_f32, pack_ids
from bus.messages import Attempt, Turn, Verdict
from policy.batch import (assemble, collate, shard, signal_members, trajectory,
                          trajectory_problem)
from policy.groups import GroupBuffer
from policy.sampling import choose_tokens
from tests.test_generator import make_task

pytestmark = pytest.mark.unit


def turn(prompt, completion, version=0, logps=None, feedback="") -> Turn:
    return Turn(prompt_ids=pack_ids(prompt), completion_ids=pack_ids(completion),
                logprobs=pack_f32(logps if logps is not None else [-0.5] * len(completion)),
                completion="", policy_version=version, feedback=feedback)


def verdict(group: str, index: int, reward, size: int = 2, version: int = 0,
            outcome: str | None = None, turns=None) -> Verdict:
    attempt = Attempt(attempt_id=f"{group}.{index}", group_id=group, index=index,
                      group_size=size, task=make_task(), policy_version=version,
                      turns=turns or [turn([1, 2, 3], [4, 5], version)])
    outcome = outcome or ("dropped" if reward is None else "pass" if reward == 1 else "fail")
    return Verdict(verdict_id=attempt.attempt_id, attempt=attempt, outcome=outcome,
                   reward=reward, trainable=outcome != "dropped")


def test_multi_turn_trajectory_trains_completions_and_masks_prompt_and_feedback():
    """Two turns: [prompt 1 2][done 3][feedback 4 5][done 6]; only 3 and 6 are sampled."""
    attempt = verdict("g", 0, 1.0, turns=[turn([1, 2], [3], logps=[-0.1], feedback="no"),
                                           turn([4, 5], [6], logps=[-0.2])]).attempt
    ids, sampled, behav = trajectory(attempt, max_len=100)
    assert ids.tolist() == [1, 2, 3, 4, 5, 6]
    assert sampled.tolist() == [False, False, True, False, False, True]
    assert behav.tolist() == pytest.approx([0, 0, -0.1, 0, 0, -0.2])
    batch = collate([assemble_one(attempt)], pad_id=0)
    assert batch["targets"].tolist() == [[2, 3, 4, 5, 6]]
    assert batch["mask"].tolist() == [[0, 1, 0, 0, 1]]


def assemble_one(attempt):
    from policy.batch import TrainSample

    ids, sampled, behav = trajectory(attempt, 100)
    return TrainSample("v", "g", 0, 1.0, ids, sampled, behav)


def test_dropped_member_is_never_trained_and_missing_from_the_advantage():
    """Group (1, dropped, 0): the two judged members get +-1, the dropped one is counted."""
    buf = GroupBuffer(batch_size=3, timeout_s=60)
    for i, r in enumerate([1.0, None, 0.0]):
        buf.add(verdict("g", i, r, size=3), f"h{i}", now=0.0)
    out = assemble(buf.take_batch(now=0.0), version=0, max_staleness=0, scale=True, max_len=100)
    assert sorted((s.verdict_id, round(s.advantage, 4)) for s in out.samples) == [
        ("g.0", 1.0), ("g.2", -1.0)]
    assert out.dropped == 1 and sorted(out.consumed) == ["g.0", "g.1", "g.2"]


def test_stale_samples_are_rejected_and_counted():
    """Learner at version 3, bound 1: a sample of version 1 is stale, one of version 2 is not."""
    groups = GroupBuffer(batch_size=4, timeout_s=60)
    for g, version in (("old", 1), ("new", 2)):
        for i in range(2):
            groups.add(verdict(g, i, float(i), version=version), None, now=0.0)
    out = assemble(groups.take_batch(0.0), version=3, max_staleness=1, scale=True, max_len=100)
    assert out.stale == 2 and {s.group_id for s in out.samples} == {"new"}
    assert out.staleness == [1, 1]


def test_groups_without_signal_are_skipped_but_consumed():
    """Both members passed: zero advantage, nothing to train, both consumed."""
    buf = GroupBuffer(batch_size=2, timeout_s=60)
    buf.add(verdict("g", 0, 1.0), None, 0.0)
    buf.add(verdict("g", 1, 1.0), None, 0.0)
    out = assemble(buf.take_batch(0.0), 0, 0, True, 100)
    assert out.samples == [] and out.no_signal == 2 and out.passed == 2


def test_every_consumed_verdict_is_trained_or_left_out_with_its_reason():
    """Three groups (one dropped member, one stale, one without signal): each id has one fate."""
    buf = GroupBuffer(batch_size=7, timeout_s=60)
    for i, r in enumerate([1.0, None, 0.0]):
        buf.add(verdict("mixed", i, r, size=3, version=3), None, 0.0)
    for i in range(2):
        buf.add(verdict("old", i, float(i), version=1), None, 0.0)
        buf.add(verdict("same", i, 1.0, version=3), None, 0.0)
    out = assemble(buf.take_batch(0.0), version=3, max_staleness=1, scale=True, max_len=100)
    assert out.left_out == {"dropped": ["mixed.1"], "stale": ["old.0", "old.1"],
                            "no_signal": ["same.0", "same.1"]}
    trained = [s.verdict_id for s in out.samples]
    assert trained == ["mixed.0", "mixed.2"]
    assert sorted(trained + [v for ids in out.left_out.values() for v in ids]) == sorted(out.consumed)
    assert (out.dropped, out.stale, out.no_signal) == (1, 2, 2)


def test_batches_hold_whole_groups_and_wait_for_missing_members():
    """Batch 4 of groups of 2: a group with one member waits; complete groups go together."""
    buf = GroupBuffer(batch_size=4, timeout_s=60)
    buf.add(verdict("a", 0, 1.0), "a0", 0.0)
    buf.add(verdict("a", 1, 0.0), "a1", 0.0)
    buf.add(verdict("b", 0, 1.0), "b0", 1.0)
    assert buf.take_batch(2.0) is None
    buf.add(verdict("b", 1, 0.0), "b1", 2.0)
    buf.add(verdict("b", 1, 0.0), "b1-again", 2.5)
    batch = buf.take_batch(3.0)
    assert [g.group_id for g in batch] == ["a", "b"]
    assert batch[1].handles() == ["b0", "b1", "b1-again"]


def test_incomplete_group_is_flushed_after_the_timeout():
    """A group missing a member is trained with what came once it waited timeout_s."""
    buf = GroupBuffer(batch_size=4, timeout_s=10)
    buf.add(verdict("a", 0, 1.0, size=3), None, 0.0)
    buf.add(verdict("a", 1, 0.0, size=3), None, 0.0)
    assert buf.take_batch(9.0) is None
    assert [g.group_id for g in buf.take_batch(10.0)] == ["a"]


def refill_buffer(batch_size: int = 4, most: int = 8) -> GroupBuffer:
    return GroupBuffer(batch_size=batch_size, timeout_s=60, counted=signal_members, most=most)


def test_refill_batch_waits_for_groups_with_signal_and_takes_the_others_along():
    """Batch 4, groups of 2: a group that all passed counts nothing, so the batch waits for
    two groups with a signal and takes the one without along (left out as no_signal)."""
    buf = refill_buffer()
    for g, rewards in (("same", [1.0, 1.0]), ("mixed", [1.0, 0.0])):
        for i, r in enumerate(rewards):
            buf.add(verdict(g, i, r), None, 0.0)
    assert buf.take_batch(1.0) is None
    buf.add(verdict("more", 0, 0.0), None, 1.0)
    buf.add(verdict("more", 1, 0.5), None, 1.0)
    batch = buf.take_batch(2.0)
    assert [g.group_id for g in batch] == ["same", "mixed", "more"]
    out = assemble(batch, 0, 0, True, 100)
    assert out.left_out == {"no_signal": ["same.0", "same.1"]} and len(out.samples) == 4


def test_refill_stops_waiting_at_its_limit_and_after_the_timeout():
    """Four groups without signal reach the limit (8 members): the batch is taken with no
    signal; one alone is taken once it waited timeout_s."""
    buf = refill_buffer()
    for g in "abcd":
        assert buf.take_batch(0.0) is None
        for i in range(2):
            buf.add(verdict(g, i, 0.0), None, 0.0)
    assert [g.group_id for g in buf.take_batch(0.0)] == ["a", "b", "c", "d"]
    for i in range(2):
        buf.add(verdict("e", i, 1.0), None, 0.0)
    assert buf.take_batch(59.0) is None
    assert [g.group_id for g in buf.take_batch(60.0)] == ["e"]


def test_signal_members_count_the_rewarded_members_of_a_group_with_signal():
    """(1, dropped, 0): two members count; (1, 1) and a lone reward count none."""
    buf = GroupBuffer(batch_size=100, timeout_s=0)
    for g, rewards in (("mixed", [1.0, None, 0.0]), ("same", [1.0, 1.0]), ("lone", [1.0, None])):
        for i, r in enumerate(rewards):
            buf.add(verdict(g, i, r, size=len(rewards)), None, 0.0)
    assert {g.group_id: signal_members(g) for g in buf.take_batch(0.0)} == {
        "mixed": 2, "same": 0, "lone": 0}


def test_kept_zero_signal_samples_train_and_count_in_the_batch_tokens():
    """zero_signal = "keep": both members of a group without signal are trained (advantage 0);
    the batch's tokens count them either way, 2 completion tokens each."""
    buf = GroupBuffer(batch_size=4, timeout_s=60)
    for g, rewards in (("same", [1.0, 1.0]), ("mixed", [1.0, 0.0])):
        for i, r in enumerate(rewards):
            buf.add(verdict(g, i, r), None, 0.0)
    groups = buf.take_batch(0.0)
    kept = assemble(groups, 0, 0, True, 100, keep_no_signal=True)
    dropped = assemble(groups, 0, 0, True, 100)
    assert [s.advantage for s in kept.samples] == pytest.approx([0.0, 0.0, 1.0, -1.0], abs=1e-5)
    assert not kept.no_signal
    assert len(dropped.samples) == 2 and dropped.no_signal == 2
    assert kept.batch_tokens == dropped.batch_tokens == 8


def test_bad_trajectories_are_named():
    """Ids outside the vocabulary, or logprobs that do not match the tokens, are refused."""
    ok = verdict("g", 0, 1.0).attempt
    assert trajectory_problem(ok, vocab_size=10) is None
    assert "outside 0..4" in trajectory_problem(ok, vocab_size=5)
    bad = verdict("g", 0, 1.0, turns=[turn([1], [2, 3], logps=[-0.1])]).attempt
    assert "2 tokens but 1 logprobs" in trajectory_problem(bad, vocab_size=10)


def test_shards_balance_tokens_across_ranks():
    """Lengths 9, 5, 4, 1 over two ranks: 9+1 and 5+4."""
    samples = [assemble_one(verdict("g", 0, 1.0, turns=[turn([1] * (n - 1), [2])]).attempt)
               for n in (4, 9, 1 + 1, 5)]
    lengths = [sorted(len(s.ids) for s in part) for part in shard(samples, 2)]
    assert sorted(map(sum, lengths)) == [9, 11]


def test_choose_tokens_samples_from_the_renormalised_nucleus():
    """p = (0.5, 0.3, 0.2), top_p 0.6: only tokens 0 and 1, with logprobs log .625 / log .375."""
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.2]])).repeat(400, 1)
    tokens, logps = choose_tokens(logits, torch.ones(400), torch.full((400,), 0.6),
                                  torch.Generator().manual_seed(0))
    assert set(tokens.tolist()) == {0, 1}
    expected = {0: math.log(0.625), 1: math.log(0.375)}
    assert all(abs(lp - expected[t]) < 1e-5 for t, lp in zip(tokens.tolist(), logps.tolist()))


def test_choose_tokens_greedy_row_takes_the_argmax_with_its_model_logprob():
    """Temperature 0: the argmax, with its untempered logprob log 0.5."""
    logits = torch.log(torch.tensor([[0.2, 0.5, 0.3]]))
    tokens, logps = choose_tokens(logits, torch.zeros(1), torch.ones(1))
    assert tokens.tolist() == [1] and logps.item() == pytest.approx(math.log(0.5))


def scripted_forward(script: str, chat):
    """A forward that makes the greedy choice spell `script`, one character a step."""
    ids = chat.encode(script)
    step = {"n": 0}

    def forward(ids_in, mask, positions, cache):
        logits = torch.full((ids_in.shape[0], 64), -10.0)
        logits[:, ids[min(step["n"], len(ids) - 1)]] = 10.0
        step["n"] += 1
        return logits, cache
    return forward


@pytest.mark.parametrize("include, text", [(False, "::py\nx 1"), (True, "::py\nx 1\n::\n")])
def test_a_stop_at_a_closing_fence_ends_the_turn_and_keeps_the_fence_when_asked(include, text):
    """Greedy text '::py\\nx 1\\n::\\nprose' with stop '\\n::\\n' (a fence in the test
    format's alphabet) ends at the closing fence, not the opening one; the text keeps the
    fence only with include_stop."""
    from policy.chat import char_chat_format
    from policy.engine import RowSettings
    from policy.sampling import sample_rows

    chat = char_chat_format(64)
    script = "::py\nx 1\n::\nprose after the code"
    [row] = sample_rows(scripted_forward(script, chat), [[1, 2]],
                        [RowSettings(0.0, 1.0, 60, ("\n::\n",), include)], chat, pad_id=0)
    assert row.finish_reason == "stop" and row.text == text
    assert len(row.token_ids) == len("::py\nx 1\n::\n")


def test_a_turn_ended_by_a_stop_string_takes_the_end_token_when_asked():
    """end_token_at_stop: the row ended at the closing fence gets the end-of-turn id (0 in the
    test format) as one more token, with its logprob under the model's softmax; the text is
    the same. Without it, or when the stop fills the row's token limit, no token is added."""
    from policy.chat import char_chat_format
    from policy.engine import RowSettings
    from policy.sampling import sample_rows

    chat = char_chat_format(64)
    script = "::py\nx 1\n::\nprose after the code"
    fence = len("::py\nx 1\n::\n")
    rows = {}
    for end, limit in ((True, 60), (False, 60), (True, fence)):
        [rows[end, limit]] = sample_rows(
            scripted_forward(script, chat), [[1, 2]],
            [RowSettings(0.0, 1.0, limit, ("\n::\n",), True, end_token_at_stop=end)], chat,
            pad_id=0)
    closed, plain, full = rows[True, 60], rows[False, 60], rows[True, fence]
    assert closed.token_ids == plain.token_ids + [0] and closed.text == plain.text
    assert closed.finish_reason == "stop" and chat.closes(closed.token_ids, "stop")
    expected = float(torch.log_softmax(torch.tensor([10.0] + [-10.0] * 63), -1)[1])
    assert closed.logprobs[-1] == pytest.approx(expected, abs=1e-4)  # 'p' is the argmax there
    assert full.token_ids == plain.token_ids and not chat.closes(full.token_ids, "stop")


def test_the_end_token_at_a_stop_is_refused_for_vllm_by_name():
    """vLLM samples without the extra step: the config names the setting and the fix."""
    import msgspec

    from policy.config import GeneratorConfig

    with pytest.raises(msgspec.ValidationError, match="end_token_at_stop.*engine = \"torch\""):
        msgspec.convert({"engine": "vllm", "sampling": {"end_token_at_stop": True}},
                        GeneratorConfig)
