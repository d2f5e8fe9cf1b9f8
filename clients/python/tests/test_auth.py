"""Bearer tokens against a real broker with an auth file (`serve
--auth-file`): every call carries `authorization: Bearer <token>`, the
KeepAlive stream included; calls without a valid token fail UNAUTHENTICATED;
lock names are per tenant."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import secrets
import time

import grpc
import pytest

from leasehold import Client, LeaseholdError

from certs import Ca, write
from conftest import Broker

TTL = 0.5  # the broker's default --ttl-min


def sha256_hex(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@pytest.fixture(scope="module")
def tokens():
    return {"payments": secrets.token_urlsafe(24), "search": secrets.token_urlsafe(24)}


@pytest.fixture(scope="module")
def auth_broker(tokens, tmp_path_factory):
    d = tmp_path_factory.mktemp("auth-broker")
    auth = d / "auth"
    auth.write_text(
        "".join(f"{tenant} use token:sha256:{sha256_hex(token)}\n" for tenant, token in tokens.items())
    )
    b = Broker(d / "broker.log", ["--auth-file", str(auth)])
    yield b
    b.stop()


def unique(what: str) -> str:
    return f"py-auth/{what}/{time.monotonic_ns()}"


@pytest.mark.parametrize("session", [True, False], ids=["session", "unary"])
def test_the_right_token_works_including_keepalive(auth_broker, tokens, caplog, session):
    caplog.set_level(logging.DEBUG, logger="leasehold")
    token = tokens["payments"]
    with Client(auth_broker.address, token=token, session=session) as client:
        assert token not in repr(client)
        lease = client.acquire(unique("keepalive"), ttl=TTL, holder="payments-job")
        # Renewed over the Session stream (session=False: the KeepAlive
        # stream), which must carry the token too.
        time.sleep(TTL * 5)
        assert not lease.is_lost(), lease.loss_reason
        d = client.describe(lease.name)
        assert d.held and d.holder == "payments-job" and d.fence == lease.fence
        assert client.check_fence(lease.name, lease.fence)
        lease.release()
        assert not client.describe(lease.name).held
    assert token not in caplog.text


@pytest.mark.parametrize("session", [True, False], ids=["session", "unary"])
@pytest.mark.parametrize("token", [None, "wrong-" + "x" * 20], ids=["no-token", "wrong-token"])
def test_no_or_a_wrong_token_is_unauthenticated(auth_broker, token, session):
    with Client(auth_broker.address, token=token, session=session) as client:
        for call in (
            lambda: client.acquire(unique("refused"), ttl=5),
            lambda: client.describe("anything"),
        ):
            with pytest.raises(LeaseholdError) as e:
                call()
            assert e.value.code == grpc.StatusCode.UNAUTHENTICATED
            if token is not None:
                assert token not in str(e.value) and token not in repr(e.value)
                assert token not in e.value.details


def test_tenants_do_not_see_each_others_locks(auth_broker, tokens):
    name = unique("shared-name")
    with Client(auth_broker.address, token=tokens["payments"]) as payments, Client(
        auth_broker.address, token=tokens["search"]
    ) as search:
        mine = payments.acquire(name, ttl=5, holder="payments")
        # The same name in another tenant is another lock: free, and granted.
        assert not search.describe(name).held
        theirs = search.acquire(name, ttl=5, holder="search")
        assert payments.describe(name).holder == "payments"
        assert search.describe(name).holder == "search"
        # A tenant cannot release the other's lease, even with its owner token.
        with pytest.raises(LeaseholdError):
            search.release_token(name, mine.owner_token)
        assert payments.describe(name).held
        theirs.release()
        assert payments.describe(name).held
        mine.release()


def test_a_token_over_tls_and_a_client_certificate_tenant(tokens, tmp_path):
    # Mutual TLS: a token tenant (whose client also needs a certificate) and
    # a tenant named by its client certificate's common name.
    ca = Ca("auth test CA")
    cert, key = ca.issue("localhost", ["localhost", "127.0.0.1"])
    client_ca = Ca("auth test client CA")
    ops = client_ca.issue("ops-client", ["ops-client"], client=True)
    other = client_ca.issue("someone-else", ["someone-else"], client=True)
    auth = tmp_path / "auth"
    auth.write_text(f"payments use token:sha256:{sha256_hex(tokens['payments'])}\nops use,admin cert:ops-client\n")
    b = Broker(
        tmp_path / "broker.log",
        [
            "--tls-cert", str(write(tmp_path, "s.pem", cert)),
            "--tls-key", str(write(tmp_path, "s.key", key)),
            "--tls-client-ca", str(write(tmp_path, "client-ca.pem", client_ca.pem)),
            "--auth-file", str(auth),
        ],
    )
    try:
        name = unique("cert-tenant")
        with Client(b.address, tls=ca.pem, client_cert=ops[0], client_key=ops[1]) as by_cert:
            with by_cert.acquire(name, ttl=TTL, holder="ops"):
                time.sleep(TTL * 2)
                assert by_cert.describe(name).holder == "ops"
                with Client(
                    b.address, tls=ca.pem, client_cert=other[0], client_key=other[1], token=tokens["payments"]
                ) as by_token:
                    assert not by_token.describe(name).held  # another tenant
                    with by_token.acquire(name, ttl=TTL):
                        time.sleep(TTL * 2)
        with Client(b.address, tls=ca.pem, client_cert=other[0], client_key=other[1], timeout=5) as nobody:
            with pytest.raises(LeaseholdError) as e:
                nobody.describe(name)
            assert e.value.code == grpc.StatusCode.UNAUTHENTICATED
    finally:
        b.stop()


async def test_the_asyncio_client_sends_the_token_on_every_call_and_the_stream(auth_broker, tokens):
    from leasehold import AsyncClient

    async with AsyncClient(auth_broker.address, token=tokens["search"]) as client:
        assert tokens["search"] not in repr(client)
        lease = await client.acquire(unique("aio"), ttl=TTL)
        await asyncio.sleep(TTL * 5)  # renewed over the stream, which carries the token
        assert not lease.is_lost(), lease.loss_reason
        assert (await client.describe(lease.name)).fence == lease.fence
        await lease.release()
    async with AsyncClient(auth_broker.address) as anonymous:
        with pytest.raises(LeaseholdError) as refused:
            await anonymous.acquire(unique("aio"), ttl=TTL)
        assert refused.value.code == grpc.StatusCode.UNAUTHENTICATED
