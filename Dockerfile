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

# Base images, pinned by digest: a tag moves (a rebuild would pull other
# bytes than the ones reviewed), a digest does not. The tag stays beside it
# for people; with a digest the tag is not used to pull. To update, resolve
# the tag's current digest and replace both:
#
#   docker buildx imagetools inspect rust:1.88-bookworm --format '{{json .Manifest.Digest}}'
#   docker buildx imagetools inspect gcr.io/distroless/cc-debian12:nonroot --format '{{json .Manifest.Digest}}'
#
# (Multi-platform index digests: amd64 and arm64 builds both resolve.)
# scripts/check-image fails if a FROM is not pinned this way.
#
# The builder: the crate's rust-version (MSRV). Another toolchain:
# `--build-arg RUST_IMAGE=rust:1.90-bookworm@sha256:...`.
ARG RUST_IMAGE=rust:1.88-bookworm@sha256:af306cfa71d987911a781c37b59d7d67d934f49684058f96cf72079c3626bfe0
# The runtime: distroless, glibc and CA certificates, uid 65532.
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot@sha256:9dac0a79194e45a7da0158a9c6da57b217585af0786db3845d1f0ec1a0dd182f

FROM ${RUST_IMAGE} AS builder
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
# is copied out of it in the same step. The release profile strips it
# (`strip = true` in Cargo.toml): symbols are a third of its size and of
# no use without a debugger in the image.
RUN --mount=type=cache,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,target=/usr/local/cargo/git,sharing=locked \
    --mount=type=cache,target=/build/target,sharing=locked \
    cargo build --release --locked --bin leasehold \
    && install -D -m 0755 target/release/leasehold /out/leasehold

FROM ${RUNTIME_IMAGE}

LABEL org.opencontainers.image.title="leasehold" \
      org.opencontainers.image.description="A distributed lock broker: named leases with fencing tokens over gRPC, stored in Redis" \
      org.opencontainers.image.source="https://github.com/leasehold/leasehold" \
      org.opencontainers.image.licenses="Apache-2.0"

COPY --from=builder /out/leasehold /usr/local/bin/leasehold

# The binary listens on 127.0.0.1 by default; in a container it must listen
# on every interface to be reachable. A store set up so that it may lose
# held leases (an evicting Redis, a PostgreSQL committing asynchronously) is
# refused, not served: the binary's default too, said here so that an image
# never serves one silently whatever that default becomes.
ENV LEASEHOLD_LISTEN=0.0.0.0:7420 \
    LEASEHOLD_METRICS_LISTEN=0.0.0.0:7421 \
    LEASEHOLD_STORE_UNSAFE=refuse

# 7420: gRPC (Leasehold API, grpc.health.v1, reflection). 7421: HTTP /metrics.
EXPOSE 7420 7421

# Numeric, so that Kubernetes `runAsNonRoot` can verify it.
USER 65532:65532

# Docker's health status (and Compose's `depends_on: condition:
# service_healthy`): the image's own binary asks the broker's gRPC health
# service, exec form (distroless has no shell). It counts NOT_SERVING (Redis
# unreachable) as healthy on purpose: every broker reports that at the same
# moment, and an orchestrator that replaces unhealthy containers (Swarm)
# would restart them all for an outage a restart cannot fix. Use
# `leasehold health --store` where "can take leases now" is meant.
# Kubernetes ignores HEALTHCHECK and uses the Deployment's probes instead.
# The address follows LEASEHOLD_LISTEN's default port above; change both
# together (a TLS broker needs `--broker https://... --broker-ca ...`).
HEALTHCHECK --interval=10s --timeout=5s --start-period=5s --retries=3 \
    CMD ["/usr/local/bin/leasehold", "health", "--broker", "http://127.0.0.1:7420"]

ENTRYPOINT ["/usr/local/bin/leasehold"]
CMD ["serve"]
