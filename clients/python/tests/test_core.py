"""The pure rules both clients share (_core), without a broker."""

from __future__ import annotations

import grpc
import pytest

from leasehold._core import MAX_LEAD, WaitPlan, max_wait_from


class Refusal(grpc.RpcError):
    """A failed call as gRPC reports it: a code and the broker's message."""

    def __init__(self, code: grpc.StatusCode, details: str):
        self._code, self._details = code, details

    def code(self):
        return self._code

    def details(self):
        return self._details


@pytest.mark.parametrize(
    "details, seconds",
    [
        ("wait_timeout_ms is 400000; the limit is 300000 ms (--max-wait)", 300.0),
        ("wait_timeout_ms is 400000; the limit is 5 min (--max-wait)", 300.0),
        ("wait_timeout_ms is 3000; the limit is 2 s (--max-wait)", 2.0),
        ("wait_timeout_ms is 3000; the limit is 1500 ms (--max-wait)", 1.5),
        ("wait_timeout_ms is 7200000; the limit is 1 h (--max-wait)", 3600.0),
        # Named but unreadable: 0.0 tells the caller to halve its guess.
        ("the wait is over what --max-wait allows", 0.0),
    ],
)
def test_the_broker_max_wait_is_read_from_its_refusal(details, seconds):
    assert max_wait_from(Refusal(grpc.StatusCode.INVALID_ARGUMENT, details)) == seconds


def test_other_errors_teach_nothing_about_max_wait():
    assert max_wait_from(Refusal(grpc.StatusCode.INVALID_ARGUMENT, "ttl_ms is 1; it must be ...")) is None
    assert max_wait_from(Refusal(grpc.StatusCode.ABORTED, "the limit is 2 s (--max-wait)")) is None


def test_a_wait_plan_overlaps_each_call_with_the_next_and_stops_at_the_end():
    plan = WaitPlan(None, 300.0)
    assert plan.segment(plan.start) == 300.0
    # The next call goes out MAX_LEAD before the current one's end.
    assert plan.next_at(plan.start, 300.0) == plan.start + 300.0 - MAX_LEAD
    # Short segments overlap by a third of their length.
    assert plan.next_at(plan.start, 3.0) == pytest.approx(plan.start + 2.0)
    finite = WaitPlan(10.0, 4.0)
    assert finite.segment(finite.start) == 4.0
    assert finite.segment(finite.start + 8.0) == pytest.approx(2.0)
    # The call that reaches the end of the wait has no successor.
    assert finite.next_at(finite.start + 8.0, 2.0) is None
    assert not finite.learnt(5.0) and finite.learnt(2.0) and finite.max_wait == 2.0
