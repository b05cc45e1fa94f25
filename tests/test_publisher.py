"""The learner's publisher over a real nats-server: which versions stay in the object store."""

from __future__ import annotations

import pytest

from bus import subjects
from bus.objects import list_objects
from policy.publisher import Publisher
from policy.versions import object_name

pytestmark = pytest.mark.bus


async def test_a_version_due_a_round_stays_until_its_round_is_reported(bus):
    """Keeping one version, with rounds every 2: version 2 outlives versions 3 and 4's
    uploads while its round is not reported, and goes with the next upload once it is."""
    publisher = Publisher(bus, keep=1, round_every=2)
    for version in (1, 2, 3, 4):
        await publisher.publish(version, [memoryview(b"w%d" % version)], step=version, samples=8)
    held = set(await list_objects(bus, subjects.BUCKET_WEIGHTS))
    publisher.reported = 2
    await publisher.publish(5, [memoryview(b"w5")], step=5, samples=8)
    after = set(await list_objects(bus, subjects.BUCKET_WEIGHTS))
    assert held == {object_name(2), object_name(4)}
    assert after == {object_name(4), object_name(5)}
