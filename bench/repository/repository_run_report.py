"""What a stopped repository run did: turns per episode, tool calls by kind, malformed calls,
step rewards, workspace set-up times and rewards, read from the run directory.

    PYTHONPATH=. python bench/repository/repository_run_report.py runs/<run id>

Episodes still running when the stack stopped are read from the run's JetStream store (their
newest continuation on WHET_TURNS, through a nats-server started on a copy of the store);
judged ones from WHET_VERDICTS; set-up times from the executor's `session.opened` events;
generation speed from the generator's `generator.batch_completed` events. It changes
nothing in the run directory.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

import anyio
import nats

from bus.codec import decode
from bus.messages import Attempt, Verdict
from runtime.broker.embedded import server_binary


def events(run: Path, kind: str, name: str) -> list[dict]:
    found = []
    for log in run.glob(f"logs/{kind}-*.jsonl"):
        for line in log.read_text().splitlines():
            event = json.loads(line)
            if event.get("event") == name:
                found.append(event["fields"])
    return found


async def stored(url: str, stream: str, kind):
    nc = await nats.connect(url)
    js, out = nc.jetstream(), []
    state = (await js.stream_info(stream)).state
    for seq in range(state.first_seq, state.last_seq + 1 if state.messages else 0):
        try:
            out.append(decode((await js.get_msg(stream, seq)).data, kind))
        except nats.js.errors.NotFoundError:
            continue
    await nc.close()
    return out


def read_store(run: Path) -> tuple[list[Attempt], list[Verdict]]:
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(run / "nats" / "jetstream", Path(tmp) / "js")
        conf = Path(tmp) / "read.conf"
        conf.write_text(f'listen: 127.0.0.1:-1\nmax_payload: 8388608\nports_file_dir: "{tmp}"\n'
                        f'jetstream {{\n  store_dir: "{tmp}/js"\n}}\n')
        server = subprocess.Popen([server_binary(), "-c", str(conf)], stderr=subprocess.DEVNULL)
        try:
            ports = Path(tmp) / f"nats-server_{server.pid}.ports"
            for _ in range(100):
                if ports.exists():
                    break
                time.sleep(0.05)
            url = json.loads(ports.read_text())["nats"][0]
            turns = anyio.run(stored, url, "WHET_TURNS", Attempt)
            verdicts = anyio.run(stored, url, "WHET_VERDICTS", Verdict)
        finally:
            server.terminate()
            server.wait(10)
    return turns, verdicts


def main(run: Path) -> None:
    turns, verdicts = read_store(run)
    episodes: dict[str, Attempt] = {}
    for a in [*turns, *(v.attempt for v in verdicts)]:
        if a.attempt_id not in episodes or len(a.tool_calls) >= len(episodes[a.attempt_id].tool_calls):
            episodes[a.attempt_id] = a
    calls = Counter(c.name or "malformed" for a in episodes.values() for c in a.tool_calls)
    print(f"episodes {len(episodes)} (judged {len(verdicts)}); tool calls answered per episode "
          f"{dict(Counter(len(a.tool_calls) for a in episodes.values()))}")
    print(f"tool calls by kind {dict(calls)}; malformed {calls['malformed']} of {sum(calls.values())}")
    print(f"step rewards {dict(Counter(s.reward for a in episodes.values() for s in a.steps))}")
    print(f"turn ends {dict(Counter(t.finish_reason for a in episodes.values() for t in a.turns))}")
    print(f"verdicts {dict(Counter(v.outcome for v in verdicts))} rewards {[v.reward for v in verdicts]}")
    setups = defaultdict(list)
    for f in events(run, "executor", "session.opened"):
        setups[f["task_id"]].append(round(f["setup_s"], 4))
    for task, seconds in setups.items():
        print(f"set-up s {task}: {seconds}")
    speeds = [f["tokens_per_s"] for f in events(run, "generator", "generator.batch_completed")]
    print(f"generator batches {len(speeds)}, tokens/s {speeds}")
    print(f"repair tasks added {len(events(run, 'sampler', 'sampler.repair_task_added'))}; "
          f"learner steps {len(events(run, 'learner', 'learner.step_completed'))}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
