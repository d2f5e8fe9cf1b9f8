"""Python client for Leasehold, a distributed lock broker.

A lease is exclusive ownership of a lock name for a bounded time, with a
fencing token that storage can use to refuse the writes of a holder that was
paused past its TTL::

    from leasehold import Client

    with Client("127.0.0.1:7420") as client:
        with client.acquire("jobs/nightly", ttl=10, wait=30) as lease:
            lease.on_lost(lambda reason: print("lost:", reason))
            lease.check()
            write_report(fence=lease.fence)

The same with asyncio (``grpc.aio``)::

    from leasehold import AsyncClient

    async with AsyncClient("127.0.0.1:7420") as client:
        async with client.acquire("jobs/nightly", ttl=10, wait=None) as lease:
            lease.check()
            await write_report(fence=lease.fence)

See README.md for the rules the client follows.
"""

from ._advice import AUTO, TtlAdvice
from ._aio import AsyncClient, AsyncLease, AsyncObservation
from ._client import Client, Description, FenceCheck, Leader, ListPage, Listed, Observation, default_holder
from ._lease import Lease
from . import fence
from .errors import LeaseholdError, LeaseLost, LossReason, NotAcquired
from .fence import StaleFence

__all__ = [
    "AUTO",
    "AsyncClient",
    "AsyncLease",
    "AsyncObservation",
    "Client",
    "Description",
    "FenceCheck",
    "Leader",
    "Lease",
    "ListPage",
    "Listed",
    "LeaseholdError",
    "LeaseLost",
    "LossReason",
    "NotAcquired",
    "Observation",
    "StaleFence",
    "TtlAdvice",
    "default_holder",
    "fence",
]
