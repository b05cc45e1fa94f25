"""`whet review`: stratified spot checks by people, labels kept in the run folder across
invocations, and the agreement of judges and people with 95% Wilson intervals."""

from __future__ import annotations

import json
import re

import pytest

from monitoring import review, review_log
from runtime.broker.embedded import EmbeddedServer
from tests.support.review import RUN_TRIALS, shown, stopped_run, whet


def label(t, reward_right=True, cause_right=True, hack=False, at=0.0) -> review.Label:
    return review.label_of(t, reward_right=reward_right, cause_right=cause_right, hack=hack,
                           labeller="ann", now=at)


@pytest.mark.unit
def test_strata_are_pass_hack_and_each_cause():
    """A trial's stratum is pass, hack, or its failure cause."""
    assert [review.stratum_of(t) for t in RUN_TRIALS] == [
        "pass", "pass", "pass", "model.wrong_answer", "model.wrong_answer", "infra.sandbox", "hack"]


@pytest.mark.unit
def test_sample_takes_turns_over_strata_skips_labelled_and_puts_queued_first():
    """Each stratum gets at most its quota, labelled trials are left out, queued come first."""
    picked = review.sample(RUN_TRIALS, per_stratum=2, seed=1, skip={"g0.0"}, first={"g4.0"})
    ids = [t.trial_id for t in picked]
    assert ids[0] == "g4.0" and "g0.0" not in ids
    strata = [review.stratum_of(t) for t in picked[1:]]
    assert strata[:4] == ["hack", "infra.sandbox", "model.wrong_answer", "pass"]
    assert strata.count("pass") == 2 and strata.count("model.wrong_answer") == 1
    again = review.sample(RUN_TRIALS, per_stratum=2, seed=1, skip={"g0.0"}, first={"g4.0"})
    assert [t.trial_id for t in again] == ids, "the draw is reproducible from its seed"


@pytest.mark.unit
def test_agreement_matches_hand_computed_wilson_intervals():
    """Agreement per stratum and overall, with intervals worked out by hand."""
    p = RUN_TRIALS
    labels = [label(p[0], reward_right=False, at=1.0), label(p[0], at=2.0),  # relabelled: newest counts
              label(p[1]), label(p[2], reward_right=False, hack=True),
              label(p[6], hack=True)]
    rows = {r.stratum: r for r in review.agreement(labels)}
    assert set(rows) == {"pass", "hack", "all"}
    # pass: reward right 2 of 3; hack flag right 2 of 3 (one the judges missed).
    assert (rows["pass"].reward.agreed, rows["pass"].reward.n) == (2, 3)
    assert rows["pass"].reward.interval == pytest.approx((0.20766, 0.93851), abs=1e-4)
    assert (rows["pass"].hack.agreed, rows["pass"].hack.n) == (2, 3)
    # all: reward right 3 of 4: centre (0.75 + z²/8)/(1 + z²/4) = 0.6275, half-width 0.3269.
    assert (rows["all"].reward.agreed, rows["all"].reward.n) == (3, 4)
    assert rows["all"].reward.interval == pytest.approx((0.30064, 0.95441), abs=1e-4)
    assert rows["hack"].hack.interval == pytest.approx((0.20655, 1.0), abs=1e-4)


@pytest.mark.unit
def test_label_file_torn_last_line_is_ignored_but_a_bad_middle_line_is_an_error(tmp_path):
    """A write cut short by a crash loses only that record; other damage is named."""
    path = tmp_path / "labels.jsonl"
    review_log.append(path, label(RUN_TRIALS[0]))
    review_log.append(path, label(RUN_TRIALS[1]))
    with open(path, "ab") as f:
        f.write(b'{"trial_id": "g2.0", "strat')
    assert [x.trial_id for x in review_log.read(path, review.Label)] == ["g0.0", "g1.0"]
    path.write_bytes(b"garbage\n" + path.read_bytes())
    with pytest.raises(Exception, match="labels.jsonl:1"):
        review_log.read(path, review.Label)


@pytest.mark.bus
async def test_review_records_labels_that_survive_and_reports_agreement(tmp_path):
    """Labels typed on stdin are kept in the run folder; a second review shows only unlabelled
    trials; --report prints the agreement table with the hand-computed intervals."""
    run = await stopped_run(tmp_path / "runs", RUN_TRIALS)
    # First: hack trial (right, right, a hack), infra trial (reward wrong, cause wrong), quit.
    first = whet(run, "review", "--per-stratum", "1", "--labeller", "ann",
                 stdin="y\ny\ny\n" "n\nn\nmodel.timeout\nn\n" "q\n")
    assert first.returncode == 0, first.stderr
    assert "7 trials in run r-1; 0 labelled; showing 4" in first.stdout
    one = shown(first.stdout)
    assert one[:2] == ["g6.0", "g5.0"] and "g9.0" not in one, "another run's trial is not shown"
    kept = review_log.read(run / "review" / "labels.jsonl", review.Label)
    assert [(x.trial_id, x.reward_right, x.cause_right, x.cause_should_be, x.hack) for x in kept] == [
        ("g6.0", True, True, "", True), ("g5.0", False, False, "model.timeout", False)]
    assert kept[1].outcome == "dropped" and kept[1].labeller == "ann"

    # Second: the two labelled trials are not shown again; the two shown get labels.
    second = whet(run, "review", "--per-stratum", "1", stdin="y\ny\nn\n" "n\ny\ny\n")
    assert second.returncode == 0, second.stderr
    two = shown(second.stdout)
    assert "2 labelled; showing 2" in second.stdout and not set(two) & {"g6.0", "g5.0"}
    assert sorted(review.stratum_of(t) for t in RUN_TRIALS if t.trial_id in two) == [
        "model.wrong_answer", "pass"]
    kept = review_log.read(run / "review" / "labels.jsonl", review.Label)
    assert len(kept) == 4

    # reward right 2/4 -> [0.15, 0.85]; cause right 3/4 and hack flag right 3/4 -> [0.30, 0.95]
    report = whet(run, "review", "--report")
    assert report.returncode == 0, report.stderr
    (all_row,) = [line for line in report.stdout.splitlines() if line.startswith("all ")]
    cells = re.findall(r"(\d+/\d+)\s+(\S+) \[(\S+), (\S+)\]", all_row)
    assert cells == [("2/4", "0.500", "0.15", "0.85"), ("3/4", "0.750", "0.30", "0.95"),
                     ("3/4", "0.750", "0.30", "0.95")]
    assert "4 trials labelled" in report.stdout

    # A third review with a larger quota offers every unlabelled trial left: 2 passes, 1 wrong answer.
    third = whet(run, "review", "--per-stratum", "5", stdin="q\n")
    assert "4 labelled; showing 3" in third.stdout


@pytest.mark.bus
async def test_label_file_records_labels_and_names_a_bad_line(tmp_path):
    """--label-file takes JSON lines without questions (here from a live server given by
    --url); a bad line or an unknown trial is named, and the file is then not recorded."""
    run = await stopped_run(tmp_path / "runs", RUN_TRIALS)
    good = tmp_path / "good.jsonl"
    good.write_text("\n".join(json.dumps(x) for x in [
        {"trial_id": "g0.0", "reward_right": True, "cause_right": True},
        {"trial_id": "g3.0", "reward_right": False, "cause_right": False,
         "cause_should_be": "pass"}]) + "\n")
    live = EmbeddedServer(run / "nats")
    try:
        r = whet(run, "review", "--label-file", str(good), "--url", live.start())
    finally:
        live.stop()
    assert r.returncode == 0, r.stderr
    assert "recorded 2 labels" in r.stdout
    kept = review_log.read(run / "review" / "labels.jsonl", review.Label)
    assert [(x.trial_id, x.stratum, x.cause_should_be) for x in kept] == [
        ("g0.0", "pass", ""), ("g3.0", "model.wrong_answer", "pass")]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"trial_id": "g0.0", "reward_right": true, "cause_right": true}\n'
                   '{"trial_id": "g1.0", "reward_right": "maybe", "cause_right": true}\n')
    r = whet(run, "review", "--label-file", str(bad))
    assert r.returncode == 2 and "bad.jsonl:2" in r.stderr
    missing = tmp_path / "missing.jsonl"
    missing.write_text('{"trial_id": "g9.0", "reward_right": true, "cause_right": true}\n')
    r = whet(run, "review", "--label-file", str(missing))
    assert r.returncode == 2 and "no trial 'g9.0' in this run" in r.stderr
    assert len(review_log.read(run / "review" / "labels.jsonl", review.Label)) == 2, \
        "a rejected file records nothing"
