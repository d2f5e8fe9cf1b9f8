"""TLS and mutual TLS against a real broker (`serve --tls-cert/--tls-key`,
`--tls-client-ca`), with certificates generated for each run (certs.py)."""

from __future__ import annotations

import time

import grpc
import pytest

from leasehold import Client, LeaseholdError

from certs import Ca, write
from conftest import Broker

TTL = 0.5  # the broker's default --ttl-min


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A CA, a server certificate for localhost and 127.0.0.1 (files), and
    a client certificate from a separate client CA (files)."""
    d = tmp_path_factory.mktemp("pki")
    ca = Ca("leasehold python test CA")
    cert, key = ca.issue("localhost", ["localhost", "127.0.0.1"])
    client_ca = Ca("leasehold python test client CA")
    client_cert, client_key = client_ca.issue("py-client", ["py-client"], client=True)
    return {
        "ca": ca,
        "ca_file": write(d, "ca.pem", ca.pem),
        "server_cert": write(d, "server.pem", cert),
        "server_key": write(d, "server.key", key),
        "client_ca": client_ca,
        "client_ca_file": write(d, "client-ca.pem", client_ca.pem),
        "client_cert": write(d, "client.pem", client_cert),
        "client_key": write(d, "client.key", client_key),
    }


@pytest.fixture(scope="module")
def tls_broker(pki, tmp_path_factory):
    b = Broker(
        tmp_path_factory.mktemp("tls-broker") / "broker.log",
        ["--tls-cert", str(pki["server_cert"]), "--tls-key", str(pki["server_key"])],
    )
    yield b
    b.stop()


@pytest.fixture(scope="module")
def mtls_broker(pki, tmp_path_factory):
    b = Broker(
        tmp_path_factory.mktemp("mtls-broker") / "broker.log",
        [
            "--tls-cert", str(pki["server_cert"]),
            "--tls-key", str(pki["server_key"]),
            "--tls-client-ca", str(pki["client_ca_file"]),
        ],
    )
    yield b
    b.stop()


def unique(what: str) -> str:
    return f"py-tls/{what}/{time.monotonic_ns()}"


def test_tls_with_the_right_ca_works(tls_broker, pki):
    # The CA as a file path, with a host:port target.
    with Client(tls_broker.address, tls=str(pki["ca_file"])) as client:
        assert client.tls
        lease = client.acquire(unique("path"), ttl=5)
        assert lease.fence > 0
        lease.release()
    # The CA as PEM bytes, with an https:// target (TLS from the scheme).
    with Client(f"https://{tls_broker.address}", tls=pki["ca"].pem) as client:
        name = unique("bytes")
        with client.acquire(name, ttl=5, holder="tls-holder"):
            assert client.describe(name).holder == "tls-holder"
    # By name: a certificate for localhost, reached at localhost.
    with Client(f"localhost:{tls_broker.port}", tls=pki["ca_file"]) as client:
        assert not client.describe(unique("by-name")).held


def test_leases_are_kept_alive_over_tls(tls_broker, pki):
    # The KeepAlive stream goes through the same TLS channel.
    with Client(tls_broker.address, tls=pki["ca_file"]) as client:
        lease = client.acquire(unique("keepalive"), ttl=TTL)
        time.sleep(TTL * 5)
        assert not lease.is_lost(), lease.loss_reason
        assert client.check_fence(lease.name, lease.fence)
        lease.release()


def test_tls_with_a_wrong_ca_fails(tls_broker, pki):
    other_ca = Ca("some other CA")
    with Client(tls_broker.address, tls=other_ca.pem, timeout=5) as client:
        with pytest.raises(LeaseholdError) as e:
            client.acquire(unique("wrong-ca"), ttl=5)
        assert e.value.code == grpc.StatusCode.UNAVAILABLE


def test_plaintext_client_of_a_tls_broker_fails(tls_broker):
    with Client(tls_broker.address, timeout=5) as client:
        assert not client.tls
        with pytest.raises(LeaseholdError) as e:
            client.acquire(unique("plaintext"), ttl=5)
        assert e.value.code == grpc.StatusCode.UNAVAILABLE


def test_mtls_with_a_client_certificate_works(mtls_broker, pki):
    # Files...
    with Client(
        mtls_broker.address, tls=pki["ca_file"], client_cert=pki["client_cert"], client_key=pki["client_key"]
    ) as client:
        lease = client.acquire(unique("mtls-files"), ttl=TTL)
        time.sleep(TTL * 3)  # renewed over the same mutual-TLS channel
        assert not lease.is_lost(), lease.loss_reason
        lease.release()
    # ... or PEM bytes.
    with Client(
        f"https://{mtls_broker.address}",
        tls=pki["ca"].pem,
        client_cert=pki["client_cert"].read_bytes(),
        client_key=pki["client_key"].read_bytes(),
    ) as client:
        with client.acquire(unique("mtls-bytes"), ttl=5) as lease:
            assert lease.fence > 0


def test_mtls_without_a_client_certificate_fails(mtls_broker, pki):
    with Client(mtls_broker.address, tls=pki["ca_file"], timeout=5) as client:
        with pytest.raises(LeaseholdError) as e:
            client.acquire(unique("mtls-none"), ttl=5)
        assert e.value.code == grpc.StatusCode.UNAVAILABLE


def test_mtls_with_a_certificate_from_another_ca_fails(mtls_broker, pki):
    stranger, stranger_key = Ca("not the client CA").issue("stranger", ["stranger"], client=True)
    with Client(
        mtls_broker.address, tls=pki["ca_file"], client_cert=stranger, client_key=stranger_key, timeout=5
    ) as client:
        with pytest.raises(LeaseholdError) as e:
            client.acquire(unique("mtls-stranger"), ttl=5)
        assert e.value.code == grpc.StatusCode.UNAVAILABLE


def test_server_name_overrides_the_name_checked(tls_broker, pki, tmp_path):
    # A certificate for a DNS name only, reached by IP address: the name to
    # check is given separately.
    ca = Ca("server-name CA")
    cert, key = ca.issue("broker.internal", ["broker.internal"])
    b = Broker(
        tmp_path / "broker.log",
        ["--tls-cert", str(write(tmp_path, "s.pem", cert)), "--tls-key", str(write(tmp_path, "s.key", key))],
    )
    try:
        with Client(b.address, tls=ca.pem, timeout=5) as client:
            with pytest.raises(LeaseholdError):
                client.describe(unique("no-override"))
        with Client(b.address, tls=ca.pem, server_name="broker.internal") as client:
            assert not client.describe(unique("override")).held
    finally:
        b.stop()


def test_conflicting_and_missing_tls_options_are_refused(pki, tmp_path):
    with pytest.raises(ValueError, match="together"):
        Client("127.0.0.1:1", client_cert=pki["client_cert"])
    with pytest.raises(ValueError, match="plaintext"):
        Client("http://127.0.0.1:1", tls=pki["ca_file"])
    with pytest.raises(ValueError, match="tls=False"):
        Client("https://127.0.0.1:1", tls=False)
    missing = tmp_path / "missing-ca.pem"
    with pytest.raises(LeaseholdError, match="missing-ca.pem"):
        Client("127.0.0.1:1", tls=missing)
