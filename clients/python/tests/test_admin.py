"""Administration against a real broker: Describe of another tenant's lock
and Revoke, with an auth file (`use` and `admin` credentials) and without one
(where Revoke needs `serve --enable-revoke`)."""

from __future__ import annotations

import hashlib
import secrets
import threading
import time

import grpc
import pytest

from leasehold import Client, LeaseholdError, LeaseLost, LossReason

from conftest import Broker

# Heartbeats every third of it, so the holder hears a revocation within
# about half a second.
TTL = 1.5


def sha256_hex(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@pytest.fixture(scope="module")
def tokens():
    return {
        "payments": secrets.token_urlsafe(24),  # use
        "search": secrets.token_urlsafe(24),  # use
        "ops": secrets.token_urlsafe(24),  # use,admin
    }


@pytest.fixture(scope="module")
def auth_broker(tokens, tmp_path_factory):
    d = tmp_path_factory.mktemp("admin-broker")
    auth = d / "auth"
    auth.write_text(
        f"payments use token:sha256:{sha256_hex(tokens['payments'])}\n"
        f"search use token:sha256:{sha256_hex(tokens['search'])}\n"
        f"ops use,admin token:sha256:{sha256_hex(tokens['ops'])}\n"
    )
    b = Broker(d / "broker.log", ["--auth-file", str(auth)])
    yield b
    b.stop()


def unique(what: str) -> str:
    return f"py-admin/{what}/{time.monotonic_ns()}"


def watch(lease):
    """An event set, and a list filled, by the lease's lost callback."""
    lost, reasons = threading.Event(), []

    def record(reason):
        reasons.append(reason)
        lost.set()

    lease.on_lost(record)
    return lost, reasons


def test_an_admin_describes_and_revokes_another_tenants_lock(auth_broker, tokens):
    name = unique("ledger")
    with Client(auth_broker.address, token=tokens["payments"]) as payments, Client(
        auth_broker.address, token=tokens["ops"]
    ) as ops:
        lease = payments.acquire(name, ttl=TTL, holder="payments-job")
        lost, reasons = watch(lease)

        # The admin's own namespace has no such lock; payments' has.
        assert not ops.describe(name).held
        d = ops.describe(name, tenant="payments")
        assert d.held and d.holder == "payments-job" and d.fence == lease.fence

        assert ops.revoke(name, tenant="payments") == lease.fence
        # The holder hears it at its next heartbeat (a third of the TTL), from
        # the broker: not as a deadline passed.
        assert lost.wait(TTL), "the holder never heard of the revocation"
        assert reasons == [LossReason.REVOKED]
        assert lease.loss_reason is LossReason.REVOKED
        with pytest.raises(LeaseLost) as e:
            lease.check()
        assert e.value.reason is LossReason.REVOKED
        with pytest.raises(LeaseLost):
            lease.release()  # it was lost before: nothing to release

        assert not payments.describe(name).held
        assert not ops.describe(name, tenant="payments").held
        # The next grant gets a higher fence.
        again = payments.acquire(name, ttl=TTL)
        assert again.fence > lease.fence
        again.release()


def test_a_use_only_credential_gets_permission_denied(auth_broker, tokens):
    name = unique("not-yours")
    with Client(auth_broker.address, token=tokens["payments"]) as payments, Client(
        auth_broker.address, token=tokens["search"]
    ) as search:
        lease = payments.acquire(name, ttl=TTL)
        mine = search.acquire(name, ttl=TTL)  # search's own lock of that name
        for call in (
            lambda: search.revoke(name, tenant="payments"),
            lambda: search.revoke(name),  # even its own: Revoke is for admins
            lambda: search.describe(name, tenant="payments"),
        ):
            with pytest.raises(LeaseholdError) as e:
                call()
            assert e.value.code == grpc.StatusCode.PERMISSION_DENIED
            assert "admin" in e.value.details
        # Naming one's own tenant is the same as naming none.
        assert search.describe(name, tenant="search").fence == mine.fence
        time.sleep(TTL)  # a few heartbeats: both leases are untouched
        assert not lease.is_lost() and not mine.is_lost()
        assert payments.describe(name).fence == lease.fence
        lease.release()
        mine.release()


def test_revoking_a_free_name_is_not_found(auth_broker, tokens):
    with Client(auth_broker.address, token=tokens["ops"]) as ops:
        with pytest.raises(LeaseholdError) as e:
            ops.revoke(unique("free"), tenant="payments")
        assert e.value.code == grpc.StatusCode.NOT_FOUND


def test_without_an_auth_file_revoke_needs_enable_revoke(broker, tmp_path):
    # The session's broker runs without --enable-revoke: nobody may revoke.
    name = unique("plain")
    with Client(broker.address) as client:
        lease = client.acquire(name, ttl=TTL)
        with pytest.raises(LeaseholdError) as e:
            client.revoke(name)
        assert e.value.code == grpc.StatusCode.PERMISSION_DENIED
        assert "--enable-revoke" in e.value.details
        assert not lease.is_lost()
        lease.release()

    b = Broker(tmp_path / "broker.log", ["--enable-revoke"])
    try:
        with Client(b.address) as holder, Client(b.address) as operator:
            lease = holder.acquire(name, ttl=TTL)
            lost, reasons = watch(lease)
            assert operator.revoke(name) == lease.fence
            assert lost.wait(TTL), "the holder never heard of the revocation"
            assert reasons == [LossReason.REVOKED]
            assert not operator.describe(name).held
    finally:
        b.stop()
