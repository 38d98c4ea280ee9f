# syntax=docker/dockerfile:1
# dco's images, one target per binary (docs/images.md):
#
#   docker build --target dco-operator -t dco-operator:v0.1.0 .
#   docker build --target dco-webhook  -t dco-webhook:v0.1.0 .
#   docker build --target convctl      -t convctl:v0.1.0 .
#   (--build-arg VERSION=0.1.0 --build-arg REVISION=$(git rev-parse HEAD) fill the labels)
#
# The builder compiles the release binaries and lays out each image's files with
# `hack/image --rootfs`: the same files hack/image puts in the archives it builds without a
# daemon, which tests/tests/image_archives.rs checks. So the runtime images start FROM scratch: the
# builder's dynamic loader, libc, libm and libgcc_s (what distroless/cc holds for these
# binaries; the rust image is Debian 12, glibc 2.36, like the machines hack/image runs on), the
# nonroot user 65532, the binary at /usr/local/bin/<binary>, no shell, no CA bundle (the
# binaries verify the apiserver with the ServiceAccount's ca.crt).

ARG RUST_VERSION=1.95

FROM rust:${RUST_VERSION}-bookworm AS builder
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,target=/src/target,sharing=locked \
    hack/image --rootfs /rootfs dco-operator dco-webhook convctl

FROM scratch AS convctl
ARG VERSION
ARG REVISION
COPY --from=builder /rootfs/convctl/base/ /
COPY --from=builder --chown=65532:65532 /rootfs/convctl/home/ /home/
COPY --from=builder /rootfs/convctl/app/ /
ENV PATH=/usr/local/bin HOME=/home/nonroot
USER 65532:65532
WORKDIR /home/nonroot
LABEL org.opencontainers.image.title=convctl org.opencontainers.image.licenses=Apache-2.0 \
      org.opencontainers.image.version=${VERSION} org.opencontainers.image.revision=${REVISION}
ENTRYPOINT ["/usr/local/bin/convctl"]

FROM scratch AS dco-webhook
ARG VERSION
ARG REVISION
COPY --from=builder /rootfs/dco-webhook/base/ /
COPY --from=builder --chown=65532:65532 /rootfs/dco-webhook/home/ /home/
COPY --from=builder /rootfs/dco-webhook/app/ /
ENV PATH=/usr/local/bin HOME=/home/nonroot
USER 65532:65532
WORKDIR /home/nonroot
LABEL org.opencontainers.image.title=dco-webhook org.opencontainers.image.licenses=Apache-2.0 \
      org.opencontainers.image.version=${VERSION} org.opencontainers.image.revision=${REVISION}
ENTRYPOINT ["/usr/local/bin/dco-webhook"]

# last, so a plain `docker build .` builds the operator
FROM scratch AS dco-operator
ARG VERSION
ARG REVISION
COPY --from=builder /rootfs/dco-operator/base/ /
COPY --from=builder --chown=65532:65532 /rootfs/dco-operator/home/ /home/
COPY --from=builder /rootfs/dco-operator/app/ /
ENV PATH=/usr/local/bin HOME=/home/nonroot
USER 65532:65532
WORKDIR /home/nonroot
LABEL org.opencontainers.image.title=dco-operator org.opencontainers.image.licenses=Apache-2.0 \
      org.opencontainers.image.version=${VERSION} org.opencontainers.image.revision=${REVISION}
ENTRYPOINT ["/usr/local/bin/dco-operator"]
