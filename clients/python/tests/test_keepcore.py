"""The keeper's core (_keepcore) without a broker, a network or a clock:
events in, actions out, at times the test chooses. Both keepers, the thread
of Client and the task of AsyncClient, drive this core, so what is checked
here holds for both."""

from __future__ import annotations

import time
from typing import List

import grpc
import pytest

from leasehold import _heartbeat as hb
from leasehold import _keepcore as kc
from leasehold._keepcore import (
    Answered,
    Cancel,
    Close,
    HalfClose,
    KeeperCore,
    LeaseAdded,
    LeaseDropped,
    Lost,
    OpenStream,
    Release,
    Send,
    Sleep,
    Stop,
    StreamEnded,
    TimerFired,
    Unreachable,
)
from leasehold._lease import DEADLINE_MESSAGE, _Held
from leasehold._proto import leasehold_pb2 as pb
from leasehold.errors import LossReason

from test_core import Refusal

T0 = 1000.0  # the test's clock starts here
ALIVE = pb.LeaseStatus.State.Value("STATE_ALIVE")
LOST = pb.LeaseStatus.State.Value("STATE_LOST")
REJECTED = pb.LeaseStatus.State.Value("STATE_REJECTED")
UNCONFIRMED = pb.LeaseStatus.State.Value("STATE_UNCONFIRMED")


def lease(name: str, ttl: float = 3.0, granted: float = T0, deadline=None) -> _Held:
    """A lease as an Acquire sent at ``granted`` leaves it: its deadline
    that plus the TTL less a tenth (or ``deadline``)."""
    margin = ttl / 10
    return _Held(name, f"token-{name}", 7, ttl, margin, granted + ttl - margin if deadline is None else deadline)


def beat(seq: int, *leases: _Held, rtt_us: int = 0) -> Send:
    """The heartbeat the core sends with sequence number ``seq``, reporting
    the round trip ``rtt_us`` measured since the last one (0: none)."""
    return Send(pb.KeepAliveRequest(
        seq=seq,
        leases=[pb.LeaseRef(name=h.name, owner_token=h.token, ttl_ms=0, ttl_auto=h.auto) for h in leases],
        last_round_trip_us=rtt_us,
    ))


def status(held: _Held, state=ALIVE, ttl_ms: int = 3000, reason: int = 0, message: str = "") -> pb.LeaseStatus:
    return pb.LeaseStatus(name=held.name, state=state, ttl_ms=ttl_ms, reason=reason, message=message)


def answer(gen: int, seq: int, *statuses: pb.LeaseStatus) -> Answered:
    return Answered(gen, pb.KeepAliveResponse(seq=seq, leases=statuses))


def loss(name: str) -> int:
    return pb.LossReason.Value(f"LOSS_REASON_{name}")


def sleep(until: float) -> Sleep:
    """The Sleep expected, to the float's rounding."""
    return Sleep(pytest.approx(until))  # type: ignore[arg-type]


UNREACHABLE = Refusal(grpc.StatusCode.UNAVAILABLE, "failed to connect to all addresses; last error: ...")


def core_with(*leases: _Held, at: float = T0) -> KeeperCore:
    """A core (jitter factor exactly 1) keeping ``leases`` over stream 1,
    its first heartbeat (seq 1) sent at ``at``."""
    core = KeeperCore(rand=lambda: 0.5)
    for h in leases:
        core.add(h)
    actions = core.handle(LeaseAdded(), at)
    assert actions[:2] == [OpenStream(1, len(leases)), beat(1, *leases)]
    return core


# -- opening, beating, renewing ----------------------------------------------


def test_an_idle_core_sleeps_until_an_event():
    core = KeeperCore()
    assert core.handle(TimerFired(), T0) == [Sleep(None)]


def test_the_first_lease_opens_a_stream_and_is_beaten_at_once():
    core = KeeperCore()
    h = lease("a", ttl=3.0)
    core.add(h)
    assert core.leases() == [h]
    # A beat every third of the TTL; the deadline (T0 + 2.7) is later.
    assert core.handle(LeaseAdded(), T0) == [OpenStream(1, 1), beat(1, h), sleep(T0 + 1.0)]


def test_a_confirmed_renewal_counts_from_the_send_time_and_the_beats_go_on():
    h = lease("a", ttl=3.0, granted=T0 - 1.0)  # deadline T0 + 1.7
    core = core_with(h)
    # Answered half a second after it was sent: the new deadline counts from
    # the send (T0), never from the answer, so latency makes it early.
    assert core.handle(answer(1, 1, status(h, ttl_ms=3000)), T0 + 0.5) == [sleep(T0 + 1.0)]
    assert h.deadline == pytest.approx(T0 + 2.7)
    # The next heartbeat reports that round trip.
    assert core.handle(TimerFired(), T0 + 1.0) == [beat(2, h, rtt_us=500_000), sleep(T0 + 2.0)]
    assert core.handle(answer(1, 2, status(h, ttl_ms=3000)), T0 + 1.1) == [sleep(T0 + 2.0)]
    assert h.deadline == pytest.approx(T0 + 3.7)


def test_an_unanswered_lease_wakes_the_core_at_its_deadline():
    h = lease("a", ttl=3.0)  # deadline T0 + 2.7
    core = core_with(h)
    assert core.handle(TimerFired(), T0 + 1.0) == [beat(2, h), sleep(T0 + 2.0)]
    # The next beat (T0 + 3) would come after the deadline: wake at that.
    assert core.handle(TimerFired(), T0 + 2.0) == [beat(3, h), sleep(T0 + 2.7)]


def test_answers_come_in_order_so_an_older_heartbeat_gets_none():
    h = lease("a", ttl=3.0, granted=T0 - 1.0)  # deadline T0 + 1.7
    core = core_with(h)
    core.handle(TimerFired(), T0 + 1.0)  # seq 2
    core.handle(answer(1, 2, status(h, ttl_ms=3000)), T0 + 1.2)
    assert h.deadline == pytest.approx(T0 + 3.7)
    # Seq 1's answer, after seq 2's, renews nothing (it was dropped).
    core.handle(answer(1, 1, status(h, ttl_ms=30_000)), T0 + 1.3)
    assert h.deadline == pytest.approx(T0 + 3.7)


def test_a_store_that_did_not_answer_neither_renews_nor_loses():
    h = lease("a", ttl=3.0)
    core = core_with(h)
    assert core.handle(answer(1, 1, status(h, state=UNCONFIRMED)), T0 + 0.1) == [sleep(T0 + 1.0)]
    assert h.deadline == pytest.approx(T0 + 2.7) and h.loss(T0 + 0.1) is None
    assert core.leases() == [h]


def test_more_leases_than_one_heartbeat_names_go_in_several():
    leases = [lease(f"n{i}") for i in range(hb.HEARTBEAT_LEASES + 1)]
    core = KeeperCore()
    for h in leases:
        core.add(h)
    actions = core.handle(LeaseAdded(), T0)
    assert actions == [
        OpenStream(1, len(leases)),
        beat(1, *leases[: hb.HEARTBEAT_LEASES]),
        beat(2, leases[-1]),
        sleep(T0 + 1.0),
    ]


# -- losses ------------------------------------------------------------------


@pytest.mark.parametrize(
    "state, reason, expected",
    [
        (LOST, loss("NOT_OWNER"), LossReason.NOT_OWNER),
        (LOST, loss("STORE_LOST"), LossReason.STORE_LOST),
        (LOST, loss("REVOKED"), LossReason.REVOKED),
        # Gone before our own (early) deadline: it cannot have expired.
        (LOST, loss("EXPIRED"), LossReason.STORE_LOST),
        (LOST, loss("UNSPECIFIED"), LossReason.STORE_LOST),
        (REJECTED, 0, LossReason.EXPIRED),
    ],
)
def test_a_lease_the_broker_reports_gone_is_lost_with_its_reason(state, reason, expected):
    h = lease("a", ttl=3.0)
    other = lease("b", ttl=3.0)
    core = core_with(h, other)
    actions = core.handle(
        answer(1, 1, status(h, state=state, reason=reason, message="the broker's words"), status(other)),
        T0 + 0.1,
    )
    assert actions == [Lost(h, expected, "the broker's words"), sleep(T0 + 1.0)]
    # Forgotten at once; the core leaves marking it to the driver.
    assert core.leases() == [other]
    assert h.loss(T0 + 0.1) is None
    assert core.handle(TimerFired(), T0 + 1.0) == [beat(2, other, rtt_us=100_000), sleep(T0 + 2.0)]


def test_an_expiry_the_broker_reports_after_the_local_deadline_is_expired():
    h = lease("a", ttl=3.0, deadline=T0 + 0.5)
    core = core_with(h)
    actions = core.handle(answer(1, 1, status(h, state=LOST, reason=loss("EXPIRED"))), T0 + 0.6)
    assert actions[0] == Lost(h, LossReason.EXPIRED, "")
    assert Release(h.name, h.token) not in actions  # it is gone on the broker


def test_a_passed_deadline_is_a_loss_and_the_lease_is_released_in_the_background():
    h = lease("a", ttl=3.0)  # deadline T0 + 2.7
    other = lease("b", ttl=30.0)
    core = core_with(h, other)
    actions = core.handle(TimerFired(), T0 + 2.75)
    assert actions[:2] == [Lost(h, LossReason.DEADLINE_PASSED, DEADLINE_MESSAGE), Release(h.name, h.token)]
    assert core.leases() == [other]


def test_an_answer_after_the_local_deadline_does_not_save_the_lease():
    h = lease("a", ttl=3.0, deadline=T0 + 0.5)
    core = core_with(h)
    actions = core.handle(answer(1, 1, status(h, ttl_ms=3000)), T0 + 0.6)
    assert actions[:2] == [Lost(h, LossReason.DEADLINE_PASSED, DEADLINE_MESSAGE), Release(h.name, h.token)]
    assert h.deadline == T0 + 0.5


# -- stalls, breaks, reconnections -------------------------------------------


def test_a_stream_whose_answers_stopped_is_replaced_at_once():
    h = lease("a", ttl=3.0, deadline=T0 + 10)
    core = core_with(h)
    core.handle(TimerFired(), T0 + 1.0)  # seq 2
    # Seq 1 has waited 2 s: not more than two intervals (and a second) yet.
    assert core.handle(TimerFired(), T0 + 2.0) == [beat(3, h), sleep(T0 + 3.0)]
    assert core.handle(TimerFired(), T0 + 3.0) == [Cancel(), OpenStream(2, 1), beat(4, h), sleep(T0 + 4.0)]
    # The old stream's news is stale now.
    assert core.handle(answer(1, 3, status(h, ttl_ms=60_000)), T0 + 3.1) == [sleep(T0 + 4.0)]
    assert h.deadline == T0 + 10
    assert core.handle(StreamEnded(1, 0, UNREACHABLE), T0 + 3.2) == [sleep(T0 + 4.0)]


def test_a_stream_that_does_not_take_the_heartbeats_is_replaced():
    h = lease("a", ttl=3.0)
    core = core_with(h)
    # Queued beyond MAX_BACKLOG heartbeats of one beat: gRPC is not taking them.
    assert core.handle(TimerFired(), T0 + 1.0, backlog=hb.MAX_BACKLOG) == [beat(2, h), sleep(T0 + 2.0)]
    assert core.handle(TimerFired(), T0 + 2.0, backlog=hb.MAX_BACKLOG + 1) == [
        Cancel(), OpenStream(2, 1), beat(3, h), sleep(T0 + 2.7),
    ]


def test_a_stream_that_could_not_connect_moves_on_and_reconnects_after_a_backoff():
    h = lease("a", ttl=3.0)
    core = core_with(h)
    assert core.handle(StreamEnded(1, 0, UNREACHABLE), T0 + 0.5) == [
        Unreachable(0), HalfClose(), sleep(T0 + 0.5 + hb.MIN_BACKOFF),
    ]
    # Nothing is opened before the backoff ran out, not even for news.
    assert core.handle(LeaseAdded(), T0 + 0.52) == [sleep(T0 + 0.55)]
    # Then a new stream (to whichever replica calls go to now) resumes the
    # lease at once; heartbeat numbers go on.
    assert core.handle(TimerFired(), T0 + 0.55) == [OpenStream(2, 1), beat(2, h), sleep(T0 + 1.55)]
    # An answer on the new stream renews (the old one's pending beat is gone).
    core.handle(answer(2, 1, status(h, ttl_ms=60_000)), T0 + 0.6)
    assert h.deadline == pytest.approx(T0 + 2.7)
    core.handle(answer(2, 2, status(h, ttl_ms=3000)), T0 + 0.6)
    assert h.deadline == pytest.approx(T0 + 0.55 + 2.7)


@pytest.mark.parametrize(
    "error",
    [
        None,  # the broker ended it cleanly
        Refusal(grpc.StatusCode.UNAVAILABLE, "the broker is shutting down"),
        Refusal(grpc.StatusCode.UNAVAILABLE, "Socket closed"),
        Refusal(grpc.StatusCode.INTERNAL, "RST_STREAM"),
    ],
)
def test_a_stream_that_broke_after_connecting_reconnects_to_the_same_replica(error):
    h = lease("a", ttl=3.0)
    core = core_with(h)
    assert core.handle(StreamEnded(1, 1, error), T0 + 0.5) == [HalfClose(), sleep(T0 + 0.55)]


def test_the_backoff_doubles_is_capped_by_a_beat_interval_and_resets_on_an_answer():
    h = lease("a", ttl=0.6, deadline=T0 + 100)  # a beat every 0.2 s
    core = core_with(h)
    now, gen, delays = T0, 1, []
    for _ in range(4):
        now += 0.01
        slept = core.handle(StreamEnded(gen, 0, None), now)[-1]
        delays.append(round(slept.until - now, 6))
        now = slept.until
        gen += 1
        assert core.handle(TimerFired(), now)[0] == OpenStream(gen, 1)
    assert delays == [0.05, 0.1, 0.2, 0.2]
    core.handle(answer(gen, 99, status(h)), now)  # any answer of the current stream
    slept = core.handle(StreamEnded(gen, 0, None), now + 0.01)[-1]
    assert slept.until - (now + 0.01) == pytest.approx(hb.MIN_BACKOFF)


def test_the_reconnection_is_jittered():
    h = lease("a", ttl=3.0)
    for rand, delay in ((0.0, 0.025), (0.999, 0.07495)):
        core = KeeperCore(rand=lambda: rand)
        core.add(h)
        core.handle(LeaseAdded(), T0)
        assert core.handle(StreamEnded(1, 0, None), T0)[-1].until == pytest.approx(T0 + delay)


# -- leases added and removed ------------------------------------------------


def test_a_lease_with_a_shorter_ttl_added_to_an_open_stream_brings_the_beat_forward():
    slow = lease("slow", ttl=30.0)
    core = core_with(slow)
    assert core.handle(TimerFired(), T0 + 0.1) == [sleep(T0 + 10.0)]
    fast = lease("fast", ttl=3.0, granted=T0 + 1.0)
    core.add(fast)
    # Not beaten at once (its deadline counts from its own grant): the next
    # beat comes an interval of the shorter TTL from now.
    assert core.handle(LeaseAdded(), T0 + 1.0) == [sleep(T0 + 2.0)]
    assert core.handle(TimerFired(), T0 + 2.0) == [beat(2, slow, fast), sleep(T0 + 3.0)]


def test_a_lease_with_a_longer_ttl_does_not_delay_the_beat():
    fast = lease("fast", ttl=3.0)
    core = core_with(fast)
    core.add(lease("slow", ttl=30.0))
    assert core.handle(LeaseAdded(), T0 + 0.5) == [sleep(T0 + 1.0)]


def test_a_forgotten_lease_is_no_longer_named_and_the_last_one_ends_the_stream_cleanly():
    a, b = lease("a"), lease("b")
    core = core_with(a, b)
    core.forget(a)
    assert core.handle(TimerFired(), T0 + 1.0) == [beat(2, b), sleep(T0 + 2.0)]
    core.forget(b)
    core.forget(b)  # twice is no error
    # At the next beat: nothing to keep, a clean end (no loss, no release).
    assert core.handle(TimerFired(), T0 + 2.0) == [HalfClose(), Sleep(None)]
    # A lease added later gets a new stream at once.
    c = lease("c", granted=T0 + 5.0)
    core.add(c)
    assert core.handle(LeaseAdded(), T0 + 5.0) == [OpenStream(2, 1), beat(3, c), sleep(T0 + 6.0)]


def test_forget_leaves_a_lease_that_took_the_same_token():
    first = lease("a")
    again = _Held("a", first.token, 8, 3.0, 0.3, T0 + 2.7)
    core = KeeperCore()
    core.add(first)
    core.add(again)
    core.forget(first)
    assert core.leases() == [again]


def test_a_dropped_lease_is_released_in_the_background():
    a, b = lease("a"), lease("b")
    core = core_with(a, b)
    assert core.handle(LeaseDropped(a), T0 + 0.1) == [Release(a.name, a.token), sleep(T0 + 1.0)]
    assert a.released and core.leases() == [b]
    # Dropped again (or after a release): nothing more.
    assert core.handle(LeaseDropped(a), T0 + 0.2) == [sleep(T0 + 1.0)]


def test_a_dropped_lease_past_its_deadline_is_released_too_but_one_lost_on_the_broker_is_not():
    late = lease("late", deadline=T0 + 0.5)
    gone = lease("gone")
    core = core_with(late, gone)
    core.handle(answer(1, 1, status(late), status(gone, state=LOST, reason=loss("REVOKED"))), T0 + 0.1)
    gone.mark_lost(LossReason.REVOKED)  # as the driver does with the Lost action
    assert core.handle(LeaseDropped(gone), T0 + 0.2)[:-1] == []
    # ``late`` was renewed to T0 + 2.7 by that answer: let it pass.
    assert core.handle(LeaseDropped(late), T0 + 3.0)[:1] == [Release(late.name, late.token)]


# -- closing -----------------------------------------------------------------


def test_close_cancels_the_stream_and_stops_for_good():
    core = core_with(lease("a"))
    assert core.handle(Close(), T0 + 0.1) == [Cancel(), Stop()]
    assert core.closed
    assert core.handle(TimerFired(), T0 + 5.0) == [Stop()]
    assert core.handle(answer(1, 1), T0 + 5.0) == [Stop()]


def test_close_without_a_stream_just_stops():
    assert KeeperCore().handle(Close(), T0) == [Stop()]


def test_something_else_is_no_event():
    with pytest.raises(TypeError):
        KeeperCore().handle("added", T0)  # type: ignore[arg-type]


# -- the drivers' share: which I/O each action calls -------------------------


class FakeStream:
    def __init__(self, index: int):
        self.index = index
        self.calls: List[object] = []

    def send(self, request):
        self.calls.append(("send", request.seq))

    def backlog(self) -> int:
        return 3

    def half_close(self):
        self.calls.append("half_close")

    def cancel(self):
        self.calls.append("cancel")


class FakeBrokers:
    targets = ("one:1", "two:2")

    def __init__(self):
        self.unreachable_calls: List[int] = []

    def unreachable(self, index: int) -> None:
        self.unreachable_calls.append(index)


class FakeDriver(kc.Driver):
    def __init__(self):
        self._core = KeeperCore()
        self._brokers = FakeBrokers()  # type: ignore[assignment]
        self._stream = None
        self.streams: List[FakeStream] = []
        self.fired: List[object] = []
        self.released: List[object] = []

    def _open(self, gen):
        self.streams.append(FakeStream(index=1))
        return self.streams[-1]

    def _fire(self, callbacks, reason, name):
        self.fired.append((callbacks, reason, name))

    def release_in_background(self, name, token):
        self.released.append((name, token))


def test_the_driver_performs_each_action_on_its_stream_and_returns_the_sleep():
    driver = FakeDriver()
    h = lease("a", deadline=time.monotonic() + 100)  # marking it uses the real clock
    seen = []
    h.add_callback(seen.append)
    assert driver._perform([OpenStream(1, 1), beat(1, h), Sleep(T0 + 1.0)]) == Sleep(T0 + 1.0)
    (first,) = driver.streams
    assert driver._stream is first and first.calls == [("send", 1)] and driver._backlog() == 3
    driver._perform([Unreachable(1), HalfClose(), Sleep(None)])
    assert driver._brokers.unreachable_calls == [1] and first.calls[-1] == "half_close"
    assert driver._stream is None and driver._backlog() == 0
    driver._perform([OpenStream(2, 1), Cancel(), Sleep(None)])
    assert driver.streams[1].calls == ["cancel"] and driver._stream is None
    # A loss marks the lease (waking its waiters) and hands its callbacks over.
    driver._perform([Lost(h, LossReason.REVOKED, "by an operator"), Release("x", "t"), Sleep(None)])
    assert h.loss() is LossReason.REVOKED and h.message == "by an operator"
    assert driver.fired == [([seen.append], LossReason.REVOKED, "a")]
    assert driver.released == [("x", "t")]
    assert driver._perform([Stop()]) is None


def test_a_sleep_gives_the_time_left_never_less_than_nothing():
    assert Sleep(None).timeout(T0) is None
    assert Sleep(T0 + 1.5).timeout(T0) == 1.5
    assert Sleep(T0).timeout(T0 + 1) == 0.0


# -- round trips, TTL advice and ttl="auto" ------------------------------------


def advised(gen: int, seq: int, *statuses: pb.LeaseStatus, p99_us: int = 400_000) -> Answered:
    """An answer carrying the broker's TTL advice."""
    advice = pb.TtlAdvice(
        round_trip_p99_us=p99_us, shortest_ttl_ms=3000, suggested_ttl_ms=p99_us // 100,
        leases_below=len(statuses), message="a TTL under 10x the p99",
    )
    return Answered(gen, pb.KeepAliveResponse(seq=seq, leases=statuses, advice=advice))


def test_the_last_round_trip_goes_in_each_heartbeat_but_not_on_the_next_stream():
    h = lease("a", ttl=3.0)
    core = core_with(h)
    core.handle(answer(1, 1, status(h)), T0 + 0.25)
    assert core.handle(TimerFired(), T0 + 1.0) == [beat(2, h, rtt_us=250_000), sleep(T0 + 2.0)]
    # No answer since: the last one measured still is the news.
    assert core.handle(TimerFired(), T0 + 2.0)[0] == beat(3, h, rtt_us=250_000)
    core.handle(answer(1, 3, status(h)), T0 + 2.01)
    # The stream breaks before the next beat: its round trip stays with it.
    core.handle(StreamEnded(1, 0, None), T0 + 2.1)
    actions = core.handle(TimerFired(), T0 + 3.0)
    assert actions[:2] == [OpenStream(2, 1), beat(4, h)]


def test_advice_is_told_once_per_stream_and_the_latest_is_kept(caplog):
    h = lease("a", ttl=3.0)
    core = core_with(h)
    assert core.advice is None
    with caplog.at_level("WARNING", logger="leasehold"):
        actions = core.handle(advised(1, 1, status(h)), T0 + 0.1)
        assert core.advice is not None and core.advice.round_trip_p99 == pytest.approx(0.4)
        assert core.advice.suggested_ttl == pytest.approx(4.0) and core.advice.leases_below == 1
        assert actions == [kc.Advised(core.advice), sleep(T0 + 1.0)]
        core.handle(TimerFired(), T0 + 1.0)
        # Again on the same stream: kept, neither logged nor handed over again.
        assert core.handle(advised(1, 2, status(h), p99_us=500_000), T0 + 1.1) == [sleep(T0 + 2.0)]
        assert core.advice.round_trip_p99 == pytest.approx(0.5)
    assert [r.getMessage() for r in caplog.records].count(caplog.records[0].getMessage()) == 1
    assert "a TTL under 10x the p99" in caplog.records[0].getMessage()
    # An answer without advice: the leases are fine now.
    core.handle(TimerFired(), T0 + 2.0)
    core.handle(answer(1, 3, status(h)), T0 + 2.1)
    assert core.advice is None
    # A new stream's first advice is told again.
    core.handle(StreamEnded(1, 0, None), T0 + 2.2)
    assert core.handle(TimerFired(), T0 + 3.0)[0] == OpenStream(2, 1)
    assert kc.Advised in [type(a) for a in core.handle(advised(2, 4, status(h)), T0 + 3.1)]


def auto_lease(name: str, ttl: float, granted: float = T0) -> _Held:
    """A lease taken with ttl="auto" and the default margin."""
    return _Held(name, f"token-{name}", 7, ttl, ttl / 10, granted + ttl * 0.9, auto=True, margin_follows_ttl=True)


def test_an_auto_lease_follows_the_ttl_each_renewal_applied():
    h = auto_lease("a", ttl=3.0)  # deadline T0 + 2.7, a beat every second
    fixed = lease("b", ttl=30.0)
    core = core_with(h, fixed)
    # Its heartbeats ask the broker for its suggestion (ttl_auto), the
    # fixed lease's for its own TTL.
    assert [r.ttl_auto for r in core.handle(TimerFired(), T0 + 1.0)[0].request.leases] == [True, False]
    # The broker renewed it for 6 s: TTL, margin, deadline and beat follow.
    assert core.handle(answer(1, 2, status(h, ttl_ms=6000), status(fixed, ttl_ms=30_000)), T0 + 1.1) == [
        sleep(T0 + 3.0)
    ]
    assert (h.ttl, h.margin, h.deadline) == (6.0, 0.6, pytest.approx(T0 + 1.0 + 5.4))
    assert core.handle(TimerFired(), T0 + 3.0)[0] == beat(3, h, fixed, rtt_us=100_000)
    # Then for 1.5 s: the deadline moves back (the store's expiry did), the
    # next beat comes half a second after the last.
    assert core.handle(answer(1, 3, status(h, ttl_ms=1500), status(fixed, ttl_ms=30_000)), T0 + 3.05) == [
        sleep(T0 + 3.5)
    ]
    assert h.deadline == pytest.approx(T0 + 3.0 + 1.35)
    # A fixed lease keeps its TTL whatever an answer says.
    assert fixed.ttl == 30.0


def test_a_given_margin_stays_when_an_auto_lease_ttl_changes():
    h = _Held("a", "token-a", 7, 3.0, 0.2, T0 + 2.8, auto=True, margin_follows_ttl=False)
    h.renewed(T0, 10_000, T0 + 0.1)
    assert (h.ttl, h.margin, h.deadline) == (10.0, 0.2, pytest.approx(T0 + 9.8))


def test_the_driver_hands_advice_to_the_application():
    driver = FakeDriver()
    told = []
    driver._advise = told.append  # type: ignore[method-assign]
    advice = kc.TtlAdvice(0.4, 3.0, 4.0, 1, "slow")
    assert driver._perform([kc.Advised(advice), Sleep(None)]) == Sleep(None)
    assert told == [advice]
