"""The Session stream's bookkeeping (_session.SessionBase) without a broker:
fake streams record what is written, the test plays the broker's answers
and the stream's end. Both clients drive this code (the thread one with a
lock, the asyncio one without), so what holds here holds for both."""

from __future__ import annotations

import time
from typing import List

import grpc
import pytest

from leasehold import LeaseLost, LossReason, NotAcquired
from leasehold._core import place_from, release_error
from leasehold._proto import leasehold_pb2 as pb
from leasehold._session import STALL, SessionBase, Stream, StreamError, _SyncPending, stream_full, unsupported
from leasehold.errors import Detail, from_rpc_error

from test_core import Refusal, details

PLACE = "0123456789abcdef" * 2


class FakeStream(Stream):
    def __init__(self, index: int):
        super().__init__(index)
        self.written: List[pb.SessionRequest] = []
        self.half_closed = False
        self.killed = False

    def write(self, request):
        self.written.append(request)

    def half_close(self):
        self.half_closed = True

    def kill(self):
        self.killed = True

    def backlog(self):
        return 0


class FakeBrokers:
    def __init__(self, n: int = 1):
        self.targets = tuple(f"broker-{i}:7420" for i in range(n))
        self.index = 0

    def __len__(self):
        return len(self.targets)

    def current(self):
        return self.index, None


class FakeSession(SessionBase):
    def __init__(self, brokers=None):
        super().__init__(brokers or FakeBrokers())
        self.streams: List[FakeStream] = []
        self.released: List[pb.Lease] = []

    def _open(self, stub, index):
        stream = FakeStream(index)
        self.streams.append(stream)
        return stream

    def _new_pending(self, stream, id, kind):
        return _SyncPending(stream, id, kind)

    def _arm(self, pending, timeout):
        pass

    def _release_late(self, lease):
        self.released.append(lease)


def acquire(name="n", wait_ms=0) -> pb.AcquireRequest:
    return pb.AcquireRequest(name=name, ttl_ms=1000, wait_timeout_ms=wait_ms)


def granted(id: int, name="n", token="t" * 32) -> pb.SessionResponse:
    return pb.SessionResponse(
        id=id, acquire=pb.AcquireResponse(lease=pb.Lease(name=name, owner_token=token, fence=7, ttl_ms=1000))
    )


def refused(id: int, code: grpc.StatusCode, message: str, place: str = "", reason: str = "", **metadata: str) -> pb.SessionResponse:
    error = pb.SessionError(code=code.value[0], message=message, place=place, reason=reason, metadata=metadata)
    return pb.SessionResponse(id=id, error=error)


def test_requests_carry_unique_ids_and_timeouts_and_answers_settle_them_out_of_order():
    s = FakeSession()
    a = s.submit("acquire", acquire("a", 5000), 15.0)
    b = s.submit("release", pb.ReleaseRequest(name="b", owner_token="x" * 32), 2.0)
    stream = s.streams[0]
    assert [r.id for r in stream.written] == [a.id, b.id] and a.id != b.id
    assert [r.WhichOneof("request") for r in stream.written] == ["acquire", "release"]
    # The per-call deadline is the request's timeout_ms.
    assert [r.timeout_ms for r in stream.written] == [15000, 2000]
    s._answered(stream, pb.SessionResponse(id=b.id, release=pb.ReleaseResponse()))
    assert b.done() and not a.done()
    s._answered(stream, granted(a.id, "a"))
    assert a.result().lease.name == "a" and a.index == 0
    # One stream for all of it.
    assert len(s.streams) == 1 and s.opened == 1


def test_a_session_error_is_the_error_the_unary_call_raises():
    s = FakeSession()
    p = s.submit("acquire", acquire(), 1.0)
    message = "lock 'n' is held by 'x' (fence 3) for another 400 ms; waited 2000 ms"
    s._answered(s.streams[0], refused(p.id, grpc.StatusCode.ABORTED, message, PLACE))
    error = p.exception()
    assert error.code() == grpc.StatusCode.ABORTED and error.details() == message
    # The kept place, where the unary call has it (leasehold-place).
    assert place_from(error) == PLACE
    raised = from_rpc_error(error)
    assert isinstance(raised, NotAcquired) and str(raised) == message
    assert str(raised) == str(from_rpc_error(Refusal(grpc.StatusCode.ABORTED, message)))
    assert PLACE not in repr(error)  # a secret

    # The reason and facts, where the unary call has them (its details).
    held = s.submit("acquire", acquire(), 1.0)
    s._answered(s.streams[0], refused(held.id, grpc.StatusCode.ABORTED, message, "", "LOCK_HELD", holder="x", fence="3"))
    raised = from_rpc_error(held.exception())
    unary = from_rpc_error(
        Refusal(grpc.StatusCode.ABORTED, message, details("LOCK_HELD", retry_ms=400, holder="x", fence="3"))
    )
    assert (raised.reason, raised.metadata, str(raised)) == (unary.reason, unary.metadata, str(unary))

    gone = s.submit("release", pb.ReleaseRequest(name="n", owner_token="x" * 32), 1.0)
    s._answered(s.streams[0], refused(gone.id, grpc.StatusCode.NOT_FOUND, "no lease: it expired"))
    lost = release_error(gone.exception())
    assert isinstance(lost, LeaseLost) and str(lost) == str(release_error(Refusal(grpc.StatusCode.NOT_FOUND, "no lease: it expired")))
    # Revoked (LEASE_REVOKED): a loss REVOKED, either way.
    revoked = s.submit("release", pb.ReleaseRequest(name="n", owner_token="x" * 32), 1.0)
    s._answered(s.streams[0], refused(revoked.id, grpc.StatusCode.NOT_FOUND, "revoked", "", "LEASE_REVOKED", name="n", fence="7"))
    lost = release_error(revoked.exception())
    assert isinstance(lost, LeaseLost) and lost.reason is LossReason.REVOKED and lost.metadata["fence"] == "7"
    unary_lost = release_error(Refusal(grpc.StatusCode.NOT_FOUND, "revoked", details("LEASE_REVOKED", name="n", fence="7")))
    assert unary_lost.reason is LossReason.REVOKED and str(unary_lost) == str(lost)


def test_a_broken_stream_fails_its_requests_with_its_status_and_the_next_request_opens_another():
    s = FakeSession()
    first = [s.submit("acquire", acquire(f"n{i}", 10_000), 20.0) for i in range(3)]
    broken = Refusal(grpc.StatusCode.UNAVAILABLE, "Socket closed")
    s._ended(s.streams[0], broken)
    assert all(p.exception() is broken for p in first)
    again = s.submit("acquire", acquire(), 1.0)
    assert len(s.streams) == 2 and s.streams[1].written[0].id == again.id
    # Ids are never reused, across streams too.
    assert again.id > max(p.id for p in first)


def test_a_broker_without_the_session_rpc_is_remembered():
    s = FakeSession(FakeBrokers(2))
    p = s.submit("acquire", acquire(), 1.0)
    s._ended(s.streams[0], Refusal(grpc.StatusCode.UNIMPLEMENTED, "Method not found"))
    assert unsupported(p.exception())
    assert not s.usable()
    s._brokers.index = 1  # another replica may know it
    assert s.usable()
    # An UNIMPLEMENTED answer to one request is the broker's refusal, not this.
    q = s.submit("acquire", acquire(), 1.0)
    s._answered(s.streams[1], refused(q.id, grpc.StatusCode.UNIMPLEMENTED, "no semaphores here"))
    assert not unsupported(q.exception()) and s.usable()


def test_a_cancelled_acquire_sends_cancel_and_a_grant_that_crossed_it_is_released():
    s = FakeSession()
    p = s.submit("acquire", acquire(wait_ms=60_000), 70.0)
    stream = s.streams[0]
    assert p.cancel()
    assert p.exception().code() == grpc.StatusCode.CANCELLED
    cancel = stream.written[-1]
    assert cancel.WhichOneof("request") == "cancel" and cancel.cancel.id == p.id
    assert not p.cancel()  # once
    # The broker granted it before it read the cancel: released here.
    s._answered(stream, granted(p.id))
    assert [lease.owner_token for lease in s.released] == ["t" * 32]
    # A cancelled one answered CANCELLED: nothing to do.
    q = s.submit("acquire", acquire(wait_ms=60_000), 70.0)
    q.cancel()
    s._answered(stream, refused(q.id, grpc.StatusCode.CANCELLED, "the call was cancelled by the client"))
    assert len(s.released) == 1


def test_an_answered_request_cannot_be_cancelled_and_its_grant_is_the_callers():
    s = FakeSession()
    p = s.submit("acquire", acquire(), 1.0)
    s._answered(s.streams[0], granted(p.id))
    assert not p.cancel()
    assert p.result().lease.owner_token == "t" * 32
    assert s.released == [] and len(s.streams[0].written) == 1


def test_a_deadline_past_fails_the_request_locally_and_cancels_it():
    s = FakeSession()
    p = s.submit("acquire", acquire(), 1.0)
    s._expire(p)
    assert p.exception().code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert s.streams[0].written[-1].cancel.id == p.id


def test_a_stream_to_a_replica_no_longer_current_takes_no_new_request_and_closes_when_answered():
    brokers = FakeBrokers(2)
    s = FakeSession(brokers)
    waiting = s.submit("acquire", acquire(wait_ms=60_000), 70.0)
    ended = []
    old = s.attach(ended.append)
    brokers.index = 1  # failover
    p = s.submit("release", pb.ReleaseRequest(name="n", owner_token="x" * 32), 1.0)
    new = s.streams[1]
    assert p.stream is new and new.index == 1
    assert ended == [None]  # the keeper moves on too
    assert not old.half_closed  # a request still waits on it...
    assert waiting.cancel()  # ...and can still be cancelled there
    assert old.written[-1].cancel.id == waiting.id
    assert old.half_closed


def test_a_stream_that_heard_nothing_since_a_heartbeat_long_unanswered_is_killed():
    s = FakeSession()
    stream = s.attach(lambda error: None)
    now = time.monotonic()
    stream.heard = now - 2 * STALL - 1
    assert not s.stalled(stream, now)  # a heartbeat just sent: not yet
    assert s.stalled(stream, now - 2 * STALL)
    assert stream.killed
    s._ended(stream, Refusal(grpc.StatusCode.CANCELLED, "Locally cancelled by application!"))
    # Its requests fail as over a broken connection, not as cancelled.
    other = s.attach(lambda error: None)
    assert other is not stream
    other.heard = now
    assert not s.stalled(other, now - 2 * STALL)  # it answers: only slow heartbeats


def test_a_stream_refusing_an_acquire_for_its_lease_cap_is_told_apart():
    def exhausted(limit: str) -> StreamError:
        return StreamError(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "for people",
            answered=True,
            detail=Detail("LIMIT_REACHED", {"limit": limit}),
        )

    assert stream_full(exhausted("max-stream-leases"))
    assert not stream_full(exhausted("tenant-max-leases"))
    # Read from the details, never from the message.
    assert not stream_full(
        StreamError(grpc.StatusCode.RESOURCE_EXHAUSTED, "the limit is 1000 per stream (--max-stream-leases)", answered=True)
    )


def test_closing_cancels_waiting_acquires_and_half_closes():
    s = FakeSession()
    p = s.submit("acquire", acquire(wait_ms=60_000), 70.0)
    streams = s._closing()
    assert streams == [s.streams[0]]
    assert s.streams[0].written[-1].cancel.id == p.id and s.streams[0].half_closed
    assert not s.usable()
    s._answered(s.streams[0], refused(p.id, grpc.StatusCode.CANCELLED, "the call was cancelled by the client"))
    assert p.exception().code() == grpc.StatusCode.CANCELLED
    with pytest.raises(Exception):
        s.submit("acquire", acquire(), 1.0)
