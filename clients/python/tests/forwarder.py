"""A gRPC server in this process that forwards every call to a real broker,
bytes as they are, and records which methods were called: with
``session=False``, a broker from before the Session RPC as far as a client
can tell (it knows no Session method, so gRPC answers UNIMPLEMENTED, as an
older broker does). Metadata (the bearer token) and trailing metadata (a
kept place) go through; a cancelled call is cancelled upstream."""

from __future__ import annotations

import concurrent.futures

import grpc

SERVICE = "/leasehold.v1.LeaseholdService/"
#: Methods that stream both ways, or from the server.
_BIDI = {"KeepAlive", "Session"}
_SERVER_STREAMING = {"Observe"}


def _metadata(context):
    return tuple((k, v) for k, v in context.invocation_metadata() if k == "authorization")


class _Forward(grpc.GenericRpcHandler):
    def __init__(self, channel: grpc.Channel, session: bool):
        self._channel = channel
        self._session = session
        #: The methods called, in order (Session included: it is refused).
        self.calls = []

    def service(self, details):
        method = details.method
        if not method.startswith(SERVICE):
            return None
        name = method[len(SERVICE):]
        self.calls.append(name)
        if name == "Session" and not self._session:
            return None  # unknown here: UNIMPLEMENTED
        if name in _BIDI:
            return grpc.stream_stream_rpc_method_handler(self._bidi(method))
        if name in _SERVER_STREAMING:
            return grpc.unary_stream_rpc_method_handler(self._server_streaming(method))
        return grpc.unary_unary_rpc_method_handler(self._unary(method))

    def _unary(self, method):
        def handle(request: bytes, context):
            call = self._channel.unary_unary(method).future(
                request, timeout=context.time_remaining(), metadata=_metadata(context)
            )
            context.add_callback(call.cancel)
            try:
                return call.result()
            except grpc.RpcError as e:
                context.set_trailing_metadata(e.trailing_metadata() or ())
                context.abort(e.code(), e.details())

        return handle

    def _server_streaming(self, method):
        def handle(request: bytes, context):
            call = self._channel.unary_stream(method)(request, metadata=_metadata(context))
            context.add_callback(call.cancel)
            try:
                yield from call
            except grpc.RpcError as e:
                context.abort(e.code(), e.details())

        return handle

    def _bidi(self, method):
        def handle(requests, context):
            call = self._channel.stream_stream(method)(requests, metadata=_metadata(context))
            context.add_callback(call.cancel)
            try:
                yield from call
            except grpc.RpcError as e:
                context.abort(e.code(), e.details())

        return handle


class Forwarder:
    """Listens on a free loopback port (``address``) and forwards to
    ``upstream`` (``host:port``); ``session=False``: all but Session."""

    def __init__(self, upstream: str, session: bool = True):
        self._channel = grpc.insecure_channel(upstream)
        self._forward = _Forward(self._channel, session)
        self._server = grpc.server(concurrent.futures.ThreadPoolExecutor(64))
        self._server.add_generic_rpc_handlers([self._forward])
        port = self._server.add_insecure_port("127.0.0.1:0")
        self.address = f"127.0.0.1:{port}"
        self._server.start()

    @property
    def calls(self):
        return list(self._forward.calls)

    def close(self) -> None:
        self._server.stop(None)
        self._channel.close()
