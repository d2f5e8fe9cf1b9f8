"""Every refusal the public API can meet, sent to a real broker: each one's
reason (from the broker's status details, or the Session stream's
SessionError), and a message in the caller's words: a refusal of an
argument names this client's parameter, and no message shows a proto field
name (read from the .proto here), gRPC's transport text, or a text twice.
Both ways requests travel (the Session stream and unary calls), and the
asyncio client."""

from __future__ import annotations

import concurrent.futures
import re
import secrets
import time
from pathlib import Path

import grpc
import pytest

from leasehold import AsyncClient, Client, LeaseholdError, LeaseLost, LossReason, NotAcquired
from leasehold._proto import leasehold_pb2 as pb
from leasehold._proto import leasehold_pb2_grpc as pb_grpc

from conftest import REPO, Broker, eventually, free_port

PROTO = REPO / "proto" / "leasehold" / "v1" / "leasehold.proto"

#: The broker's limits in these tests (its flags below).
MAX_WAIT = 2.0
MAX_LOCK_DELAY = 5.0
MAX_LIMIT = 8


def proto_fields_with_underscores(path: Path = PROTO):
    """Every field of the proto whose name has an underscore (``ttl_ms``,
    ``owner_token``, ``keep_place``...): the words a message for people
    must not use."""
    field = re.compile(r"^\s*(?:repeated\s+|optional\s+)?(?:map<[^>]*>|[A-Za-z_][\w.]*)\s+([a-z_][a-z0-9_]*)\s*=\s*\d+\s*[;\[]")
    names = set()
    for line in path.read_text().splitlines():
        line = line.split("//", 1)[0]
        found = field.match(line)
        if found and "_" in found.group(1):
            names.add(found.group(1))
    return names


FIELDS = proto_fields_with_underscores()

#: What gRPC libraries and transports put around a message.
TRANSPORT = (
    "Client specified",
    "tcp connect error: tcp connect error",
    "failed to connect to all addresses",
    "last error",
    "ipv4:",
    "ipv6:",
    "UNKNOWN:",
    "debug_error_string",
    "_InactiveRpcError",
    "grpc_status",
    "status = StatusCode",
    "details = ",
)


def test_the_field_names_come_from_the_proto():
    assert {"wait_timeout_ms", "ttl_ms", "owner_token", "keep_place", "lock_delay_ms"} <= FIELDS


#: This client's parameters that a refusal may name, some spelt as a proto
#: field is (``owner_token``): a message may start with one.
PARAMETERS = ("name", "ttl", "wait", "lock_delay", "limit", "holder", "owner_token", "value", "election", "tenant")


def check_message(error: BaseException) -> str:
    """The error's message, checked: no proto field name (but for the
    parameter it starts with), no transport text, no part said twice in a
    row."""
    text = str(error)
    assert text, repr(error)
    rest = text
    for parameter in PARAMETERS:
        if text.startswith(f"{parameter}=") or text.startswith(f"{parameter}:"):
            rest = text[len(parameter) :]
    words = set(re.findall(r"[A-Za-z0-9_]+", rest))
    leaked = sorted(FIELDS & words)
    assert not leaked, f"{text!r} names proto fields {leaked}"
    for noise in TRANSPORT:
        assert noise not in text, f"{text!r} has transport text {noise!r}"
    parts = text.split(": ")
    assert all(a != b for a, b in zip(parts, parts[1:])), f"{text!r} repeats itself"
    return text


@pytest.fixture(scope="module")
def refusing(tmp_path_factory):
    """A broker with small limits, where revocation is allowed."""
    b = Broker(
        tmp_path_factory.mktemp("refusals") / "broker.log",
        args=[
            "--max-wait", f"{MAX_WAIT:g}s",
            "--max-lock-delay", f"{MAX_LOCK_DELAY:g}s",
            "--max-semaphore-limit", str(MAX_LIMIT),
            "--enable-revoke",
        ],
    )
    yield b
    b.stop()


@pytest.fixture(params=[True, False], ids=["session", "unary"])
def session(request):
    return request.param


def unique(what: str) -> str:
    return f"py-refusals/{what}/{time.monotonic_ns()}"


def refused(call, kind=LeaseholdError) -> LeaseholdError:
    with pytest.raises(kind) as e:
        call()
    check_message(e.value)
    return e.value


def bad_argument(error: LeaseholdError, argument: str, parameter: str) -> None:
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT, error
    assert error.reason == "BAD_ARGUMENT", error
    assert error.metadata["argument"] == argument, error.metadata
    assert str(error).startswith(f"{parameter}=") or str(error).startswith(f"{parameter}:"), str(error)
    assert error.details and error.details in str(error)


def test_a_ttl_too_short_and_too_long(refusing, session):
    with Client(refusing.address, session=session) as client:
        e = refused(lambda: client.acquire(unique("ttl"), ttl=0.1))
        bad_argument(e, "ttl", "ttl")
        assert str(e).startswith("ttl=0.1: "), str(e)
        assert e.metadata["ttl_ms"] == "100" and int(e.metadata["min_ttl_ms"]) > 100
        e = refused(lambda: client.acquire(unique("ttl"), ttl=86_400))
        bad_argument(e, "ttl", "ttl")
        assert str(e).startswith("ttl=86400: "), str(e)
        assert int(e.metadata["max_ttl_ms"]) < 86_400_000


def test_a_bad_name_a_long_holder_a_long_lock_delay_a_big_limit(refusing, session):
    with Client(refusing.address, session=session) as client:
        e = refused(lambda: client.acquire("no spaces allowed", ttl=5))
        bad_argument(e, "name", "name")
        assert str(e).startswith("name='no spaces allowed': "), str(e)
        e = refused(lambda: client.acquire(unique("holder"), ttl=5, holder="h" * 5000))
        bad_argument(e, "holder", "holder")
        assert int(e.metadata["max_holder_len"]) < 5000
        e = refused(lambda: client.acquire(unique("delay"), ttl=5, lock_delay=MAX_LOCK_DELAY + 1))
        bad_argument(e, "lock_delay", "lock_delay")
        assert str(e).startswith(f"lock_delay={MAX_LOCK_DELAY + 1:g}: "), str(e)
        assert e.metadata["max_lock_delay_ms"] == str(int(MAX_LOCK_DELAY * 1000))
        e = refused(lambda: client.acquire(unique("limit"), ttl=5, limit=MAX_LIMIT + 1))
        bad_argument(e, "limit", "limit")
        assert str(e).startswith(f"limit={MAX_LIMIT + 1}: "), str(e)
        assert e.metadata["max_limit"] == str(MAX_LIMIT)
        # A name refused by a unary call names the parameter too.
        e = refused(lambda: client.describe("no spaces allowed"))
        bad_argument(e, "name", "name")
        # An empty owner token: named, never shown.
        e = refused(lambda: client.release_token(unique("token"), ""))
        bad_argument(e, "owner_token", "owner_token")
        assert str(e).startswith("owner_token: "), str(e)


def test_a_held_lock_and_no_wait(refusing, session):
    name = unique("held")
    with Client(refusing.address) as holder, Client(refusing.address, session=session) as client:
        held = holder.acquire(name, ttl=30, holder="the-holder")
        e = refused(lambda: client.acquire(name, ttl=5), NotAcquired)
        assert e.code == grpc.StatusCode.ABORTED
        assert e.reason == "LOCK_HELD", e
        assert e.metadata["holder"] == "the-holder" and e.metadata["fence"] == str(held.fence)
        assert e.retry_after is not None and 0 < e.retry_after <= 30
        assert "the-holder" in str(e)
        # Waited a little: the same, having waited.
        e = refused(lambda: client.acquire(name, ttl=5, wait=0.2), NotAcquired)
        assert e.reason == "LOCK_HELD" and int(e.metadata["waited_ms"]) > 0
        held.release()


def test_a_wait_longer_than_max_wait_is_chained_with_the_limit_from_the_details(refusing, session):
    name = unique("chain")
    with Client(refusing.address) as holder, Client(refusing.address, session=session) as client:
        held = holder.acquire(name, ttl=30)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(client.acquire, name, 5, 4 * MAX_WAIT)
            # Still waiting once --max-wait has passed: the wait was chained.
            with pytest.raises(concurrent.futures.TimeoutError):
                waiting.result(timeout=MAX_WAIT + 0.5)
            held.release()
            lease = waiting.result(timeout=30)
        assert lease.waited > MAX_WAIT, lease.waited
        # The limit came from the refusal's max_wait_ms.
        assert client._max_wait == MAX_WAIT
        lease.release()


def test_releases_of_leases_gone_and_a_revocation(refusing, session):
    with Client(refusing.address, session=session) as client, Client(refusing.address) as operator:
        # A name nobody holds (never held): NOT_FOUND, LEASE_NOT_HELD.
        e = refused(lambda: client.release_token(unique("free"), secrets.token_hex(16)), LeaseLost)
        assert e.code == grpc.StatusCode.NOT_FOUND and e.reason is LossReason.EXPIRED
        # A stranger's token: FAILED_PRECONDITION, NOT_OWNER.
        name = unique("stranger")
        held = operator.acquire(name, ttl=30)
        e = refused(lambda: client.release_token(name, secrets.token_hex(16)), LeaseLost)
        assert e.code == grpc.StatusCode.FAILED_PRECONDITION and e.reason is LossReason.NOT_OWNER
        assert e.metadata["fence"] == str(held.fence)
        held.release()
        # Revoked: its release says REVOKED (NOT_FOUND, LEASE_REVOKED), and
        # the holder hears it lost, REVOKED.
        name = unique("revoked")
        lease = client.acquire(name, ttl=30)
        assert operator.revoke(name) == lease.fence
        e = refused(lambda: operator.release_token(name, lease.owner_token), LeaseLost)
        assert e.code == grpc.StatusCode.NOT_FOUND and e.reason is LossReason.REVOKED, e
        assert e.metadata["fence"] == str(lease.fence)
        assert lease.wait_lost(30) is LossReason.REVOKED
        e = refused(lease.release, LeaseLost)
        assert e.reason is LossReason.REVOKED
        # Revoking a name nobody holds: NOT_FOUND, LEASE_NOT_HELD.
        e = refused(lambda: operator.revoke(unique("nobody")))
        assert e.code == grpc.StatusCode.NOT_FOUND and e.reason == "LEASE_NOT_HELD", e


def test_a_release_of_an_expired_lease(refusing, session):
    """A lease taken by a raw call (nobody renews it) and left to expire: its
    release through the client is a loss, EXPIRED."""
    name = unique("expired")
    with grpc.insecure_channel(refusing.address) as channel:
        granted = pb_grpc.LeaseholdServiceStub(channel).Acquire(
            pb.AcquireRequest(name=name, ttl_ms=500, holder="gone"), timeout=10
        )
    with Client(refusing.address, session=session) as client:
        eventually(lambda: not client.describe(name).held, 10.0, "the lease expired")
        e = refused(lambda: client.release_token(name, granted.lease.owner_token), LeaseLost)
        assert e.code == grpc.StatusCode.NOT_FOUND and e.reason is LossReason.EXPIRED, e


def test_a_cap_reached(tmp_path, session):
    """--max-waiters 1: a second waiting acquire is refused, LIMIT_REACHED,
    naming the flag."""
    b = Broker(tmp_path / "broker.log", args=["--max-waiters", "1"])
    try:
        name = unique("cap")
        with Client(b.address) as holder, Client(b.address) as first, Client(b.address, session=session) as second:
            held = holder.acquire(name, ttl=30)
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                waiting = pool.submit(first.acquire, name, 5, 30)
                eventually(lambda: holder.describe(name).waiters == 1, 10.0, "the first waiter queued")
                e = refused(lambda: second.acquire(name, ttl=5, wait=10))
                assert e.code == grpc.StatusCode.RESOURCE_EXHAUSTED and e.reason == "LIMIT_REACHED", e
                assert e.metadata["limit"] == "max-waiters"
                held.release()
                waiting.result(timeout=30).release()
    finally:
        b.stop()


def test_a_broker_that_cannot_be_reached(session):
    with Client(f"127.0.0.1:{free_port()}", timeout=5, session=session) as client:
        e = refused(lambda: client.acquire(unique("nobody"), ttl=5))
        assert e.code == grpc.StatusCode.UNAVAILABLE and e.reason == ""
        assert str(e).startswith("could not connect to the broker"), str(e)


async def test_the_asyncio_client_reads_the_same_details(refusing):
    for session in (True, False):
        async with AsyncClient(refusing.address, session=session) as client:
            with pytest.raises(LeaseholdError) as e:
                await client.acquire(unique("ttl"), ttl=0.1)
            check_message(e.value)
            bad_argument(e.value, "ttl", "ttl")
            assert str(e.value).startswith("ttl=0.1: ")
            name = unique("held")
            async with client.acquire(name, ttl=10, holder="async-holder"):
                async with AsyncClient(refusing.address, session=session) as other:
                    with pytest.raises(NotAcquired) as e:
                        await other.acquire(name, ttl=5)
                    check_message(e.value)
                    assert e.value.reason == "LOCK_HELD" and e.value.metadata["holder"] == "async-holder"
                    assert e.value.retry_after is not None
            # A wait past --max-wait, chained with the limit learnt.
            async with client.acquire(unique("chain"), ttl=5, wait=2 * MAX_WAIT):
                pass
            assert client._max_wait == MAX_WAIT
