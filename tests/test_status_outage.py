"""`whet status` through an outage: the snapshot is asked again until the server answers (a
restart here; a node that has just rejoined a cluster in test_compose_cluster), and past its
deadline the answer is one named error, not a traceback of the client library's."""

from __future__ import annotations

import anyio
import pytest

from bus import subjects
from bus.errors import BusUnavailable
from bus.messages import WeightVersion
from runtime.cli.stack_status import gather, gather_patiently
from tests.conftest import until

pytestmark = pytest.mark.bus


async def test_status_is_read_again_until_a_restarted_server_answers(bus, nats_server):
    """Read while the server is down (a plain `gather` fails there), the snapshot comes once
    the server is back, with what it held before."""
    await bus.kv_put(subjects.BUCKET_POLICY, subjects.KEY_POLICY,
                     WeightVersion(version=3, object_name="v3"))
    nats_server.kill()
    await until(lambda: not bus.nc.is_connected)
    with pytest.raises(Exception):
        with anyio.fail_after(20):
            await gather(bus)
    read = []
    with anyio.fail_after(90):
        async with anyio.create_task_group() as tg:
            async def status() -> None:
                read.append(await gather_patiently(bus, deadline_s=60))

            tg.start_soon(status)
            await anyio.to_thread.run_sync(nats_server.start)
    assert read[0].policy_version == 3


async def test_status_past_its_deadline_names_what_it_read(bus, nats_server):
    """With the server gone for good, `BusUnavailable` (one line in `whet status`) says what
    was being read, once the deadline has passed."""
    nats_server.kill()
    await until(lambda: not bus.nc.is_connected)
    with anyio.fail_after(30), pytest.raises(BusUnavailable, match="read the stack's status"):
        await gather_patiently(bus, deadline_s=2)
    await anyio.to_thread.run_sync(nats_server.start)  # for the fixture's clean close
    await until(lambda: bus.nc.is_connected, timeout_s=30)
