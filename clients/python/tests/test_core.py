"""The pure rules both clients share (_core), without a broker."""

from __future__ import annotations

import grpc
import pytest

import time

from leasehold._core import Chain, WaitPlan, max_wait_from, place_from
from leasehold._proto import leasehold_pb2 as pb


class Refusal(grpc.RpcError):
    """A failed call as gRPC reports it: a code and the broker's message."""

    def __init__(self, code: grpc.StatusCode, details: str, trailing=()):
        self._code, self._details, self._trailing = code, details, trailing

    def trailing_metadata(self):
        return self._trailing

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


def test_a_wait_plan_chains_calls_up_to_the_end():
    plan = WaitPlan(None, 300.0)
    assert plan.segment(plan.start) == 300.0
    assert not plan.reaches_end(plan.start, 300.0)
    finite = WaitPlan(10.0, 4.0)
    assert finite.segment(finite.start) == 4.0
    assert not finite.reaches_end(finite.start, 4.0)
    assert finite.segment(finite.start + 8.0) == pytest.approx(2.0)
    # The call that reaches the end of the wait is the last.
    assert finite.reaches_end(finite.start + 8.0, 2.0)
    assert not finite.learnt(5.0) and finite.learnt(2.0) and finite.max_wait == 2.0


PLACE = "0123456789abcdef" * 2


def test_the_kept_place_is_read_from_the_trailing_metadata():
    kept = Refusal(grpc.StatusCode.ABORTED, "held", (("other", "x"), ("leasehold-place", PLACE)))
    assert place_from(kept) == PLACE
    assert place_from(Refusal(grpc.StatusCode.ABORTED, "held")) == ""


def test_each_call_but_the_last_keeps_its_place_and_the_next_waits_in_it():
    chain = Chain("Acquire", pb.AcquireRequest(name="n", ttl_ms=1000), None, 2.0, 1)
    request, segment = chain.request(time.monotonic())
    assert request.keep_place and request.place == "" and request.name == "n"
    chain.sent("call", time.monotonic(), segment, 0)
    kept = Refusal(grpc.StatusCode.ABORTED, "held", (("leasehold-place", PLACE),))
    assert chain.failed(chain.calls[0], kept, None, time.monotonic()) is None
    assert chain.needs_call(time.monotonic())
    request, _ = chain.request(time.monotonic())
    assert request.keep_place and request.place == PLACE

    # A wait that one call covers keeps nothing: its caller then gives up.
    once = Chain("Campaign", pb.CampaignRequest(election="e"), 1.0, 2.0, 1)
    request, segment = once.request(time.monotonic())
    assert not request.keep_place and request.wait_timeout_ms == pytest.approx(1000, abs=20)
