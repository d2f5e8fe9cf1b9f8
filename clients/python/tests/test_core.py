"""The pure rules both clients share (_core), without a broker."""

from __future__ import annotations

import grpc
import pytest

import time

from leasehold import NotAcquired
from leasehold._core import Chain, WaitPlan, max_wait_from, place_from
from leasehold.errors import from_rpc_error
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


def details(reason: str, retry_ms: int = 0, domain: str = "leasehold.v1", **metadata: str):
    """A ``grpc-status-details-bin`` trailer as the broker sends it: a
    google.rpc.Status with an ErrorInfo (and a RetryInfo)."""
    from google.rpc import error_details_pb2, status_pb2

    status = status_pb2.Status(code=3, message="for people")
    status.details.add().Pack(error_details_pb2.ErrorInfo(reason=reason, domain=domain, metadata=metadata))
    if retry_ms:
        retry = error_details_pb2.RetryInfo()
        retry.retry_delay.FromMilliseconds(retry_ms)
        status.details.add().Pack(retry)
    return (("grpc-status-details-bin", status.SerializeToString()),)


def test_the_broker_max_wait_is_read_from_its_refusals_details():
    refusal = Refusal(
        grpc.StatusCode.INVALID_ARGUMENT,
        "a wait of 10 min is above this broker's maximum of 5 min (--max-wait)",
        details("BAD_ARGUMENT", argument="wait", wait_ms="600000", max_wait_ms="300000"),
    )
    assert max_wait_from(refusal) == 300.0
    assert max_wait_from(
        Refusal(grpc.StatusCode.INVALID_ARGUMENT, "", details("BAD_ARGUMENT", argument="wait", max_wait_ms="1500"))
    ) == 1.5


def test_other_errors_teach_nothing_about_max_wait():
    # Another argument, another code, no details (a broker from before
    # them: its message is not read), another domain.
    ttl = details("BAD_ARGUMENT", argument="ttl", ttl_ms="1", min_ttl_ms="500", max_wait_ms="2000")
    assert max_wait_from(Refusal(grpc.StatusCode.INVALID_ARGUMENT, "", ttl)) is None
    wait = details("BAD_ARGUMENT", argument="wait", max_wait_ms="2000")
    assert max_wait_from(Refusal(grpc.StatusCode.ABORTED, "", wait)) is None
    assert max_wait_from(Refusal(grpc.StatusCode.INVALID_ARGUMENT, "the limit is 2 s (--max-wait)")) is None
    other = details("BAD_ARGUMENT", domain="proxy.example", argument="wait", max_wait_ms="2000")
    assert max_wait_from(Refusal(grpc.StatusCode.INVALID_ARGUMENT, "", other)) is None


def test_a_refusal_carries_its_reason_metadata_and_retry_delay():
    held = Refusal(
        grpc.StatusCode.ABORTED,
        "lock 'x' is held by 'h' (fence 3) for another 900 ms; waited 0 ms; set a wait to wait for it",
        details("LOCK_HELD", retry_ms=900, name="x", holder="h", fence="3", remaining_ms="900", waited_ms="0"),
    )
    e = from_rpc_error(held)
    assert isinstance(e, NotAcquired)
    assert e.reason == "LOCK_HELD" and e.metadata["holder"] == "h" and e.retry_after == pytest.approx(0.9)
    assert str(e) == held.details()


def test_a_bad_argument_names_the_callers_parameter():
    ttl = Refusal(
        grpc.StatusCode.INVALID_ARGUMENT,
        "a TTL of 100 ms is below this broker's minimum of 500 ms (--ttl-min)",
        details("BAD_ARGUMENT", argument="ttl", ttl_ms="100", min_ttl_ms="500", max_ttl_ms="3600000"),
    )
    assert str(from_rpc_error(ttl, {"ttl": 0.1})) == (
        "ttl=0.1: a TTL of 100 ms is below this broker's minimum of 500 ms (--ttl-min)"
    )
    # Without the caller's value, the value sent, in seconds.
    assert str(from_rpc_error(ttl)).startswith("ttl=0.1: a TTL")
    token = Refusal(
        grpc.StatusCode.INVALID_ARGUMENT,
        "the owner token is empty: pass the owner token the grant returned",
        details("BAD_ARGUMENT", argument="owner_token"),
    )
    # A secret is named, never shown.
    assert str(from_rpc_error(token, {"owner_token": "secret"})) == f"owner_token: {token.details()}"


def test_a_call_that_could_not_connect_says_so_in_a_few_words():
    refused = Refusal(
        grpc.StatusCode.UNAVAILABLE,
        "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:1: "
        "Failed to connect to remote host: Connection refused",
    )
    e = from_rpc_error(refused)
    assert str(e) == "could not connect to the broker at 127.0.0.1:1: Connection refused"
    assert e.details == refused.details() and e.reason == ""
    tls = Refusal(
        grpc.StatusCode.UNAVAILABLE,
        "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:9: Ssl handshake failed: "
        "SSL_ERROR_SSL: error:1000007d:SSL routines:OPENSSL_internal:CERTIFICATE_VERIFY_FAILED",
    )
    assert str(from_rpc_error(tls)) == (
        "could not connect to the broker at 127.0.0.1:9: Ssl handshake failed: "
        "SSL_ERROR_SSL: error:1000007d:SSL routines:OPENSSL_internal:CERTIFICATE_VERIFY_FAILED"
    )
    for unresolved in (
        "DNS resolution failed for nowhere.invalid:7420: C-ares status is not ARES_SUCCESS qtype=AAAA "
        "name=nowhere.invalid is_balancer=0: Domain name not found",
        "errors resolving nowhere.invalid:7420: [field:hostname lookup error:address lookup failed for "
        "nowhere.invalid:7420: Domain name not found]",
    ):
        assert str(from_rpc_error(Refusal(grpc.StatusCode.UNAVAILABLE, unresolved))) == (
            "could not connect to the broker: Domain name not found"
        )


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
