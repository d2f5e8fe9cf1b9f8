# syntax=docker/dockerfile:1
#
# Leasehold broker image.
#
#   docker build -t leasehold .
#   docker run --rm -p 7420:7420 -p 7421:7421 \
#       -e LEASEHOLD_STORE=redis://host.docker.internal:6379/0 leasehold
#
# Stage 1 compiles the release binary; stage 2 is distroless (glibc, CA
# certificates, no shell, no package manager) and runs it as uid 65532.

# The crate's rust-version (MSRV). `--build-arg RUST_VERSION=1` builds with
# the newest stable instead.
ARG RUST_VERSION=1.88

FROM rust:${RUST_VERSION}-bookworm AS builder
WORKDIR /build

# No system protoc is needed: proto/build.rs compiles the API with the
# pure-Rust `protox` crate.
COPY Cargo.toml Cargo.lock ./
COPY proto ./proto
COPY server ./server
COPY clients/rust ./clients/rust
# Not built (the load generators, and the tests' harness), but members of
# the workspace, which Cargo reads whole.
COPY bench ./bench
COPY tests/harness ./tests/harness
COPY src ./src

# BuildKit cache mounts keep the crates.io downloads and the compiled
# dependencies between builds, so a source change recompiles only the
# workspace's crates.
# The target directory is a cache mount (not part of the image), so the binary
# is copied out of it in the same step.
RUN --mount=type=cache,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,target=/usr/local/cargo/git,sharing=locked \
    --mount=type=cache,target=/build/target,sharing=locked \
    cargo build --release --locked --bin leasehold \
    && install -D -m 0755 target/release/leasehold /out/leasehold

FROM gcr.io/distroless/cc-debian12:nonroot

LABEL org.opencontainers.image.title="leasehold" \
      org.opencontainers.image.description="A distributed lock broker: named leases with fencing tokens over gRPC, stored in Redis" \
      org.opencontainers.image.source="https://github.com/leasehold/leasehold" \
      org.opencontainers.image.licenses="Apache-2.0"

COPY --from=builder /out/leasehold /usr/local/bin/leasehold

# The binary listens on 127.0.0.1 by default; in a container it must listen
# on every interface to be reachable.
ENV LEASEHOLD_LISTEN=0.0.0.0:7420 \
    LEASEHOLD_METRICS_LISTEN=0.0.0.0:7421

# 7420: gRPC (Leasehold API, grpc.health.v1, reflection). 7421: HTTP /metrics.
EXPOSE 7420 7421

# Numeric, so that Kubernetes `runAsNonRoot` can verify it.
USER 65532:65532

# No HEALTHCHECK: distroless has no shell or client to run one, and
# Kubernetes probes the gRPC health service directly.
ENTRYPOINT ["/usr/local/bin/leasehold"]
CMD ["serve"]
