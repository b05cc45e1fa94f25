"""Which nats-py errors mean "the server is out of reach for now, try again".

Consumes nothing; declares the retryable error types and the JetStream error codes of a full
stream, for the bus modules that retry through outages. Pure declarations.
"""

from __future__ import annotations

import nats.errors
import nats.js.errors

RETRYABLE = (
    nats.errors.TimeoutError,
    nats.errors.NoRespondersError,
    nats.errors.ConnectionClosedError,
    nats.errors.ConnectionReconnectingError,
    nats.errors.OutboundBufferLimitError,
    nats.errors.StaleConnectionError,
    nats.js.errors.NoStreamResponseError,
    nats.js.errors.ServiceUnavailableError,
    TimeoutError,
)
STREAM_FULL = {10077, 10047}  # maximum messages / bytes exceeded: back off and retry
STORAGE_EXHAUSTED = 10047  # on stream create: the server cannot reserve the stream's cap
