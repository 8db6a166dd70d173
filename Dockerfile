# syntax=docker/dockerfile:1
#
# Portcullis gateway image: the gateway and its exec helper on Debian slim
# with bubblewrap, the OS sandbox Exec and code.run run in. See
# docs/deploy.md for how to run it: the sandbox needs user namespaces and a
# fresh /proc inside the container, which Docker's defaults refuse, and
# without a working sandbox the gateway refuses Exec and code.run (503
# sandbox_unavailable) rather than run them unconfined.
#
#   docker build -t portcullis .
#   docker run --rm -p 8080:8080 \
#     -v /etc/portcullis:/etc/portcullis:ro -v portcullis-data:/var/lib/portcullis \
#     --security-opt seccomp=unconfined --security-opt apparmor=unconfined \
#     --security-opt systempaths=unconfined portcullis

ARG GO_VERSION=1.26
ARG DEBIAN_RELEASE=trixie

FROM golang:${GO_VERSION}-${DEBIAN_RELEASE} AS build
WORKDIR /src
# Modules first, so source edits do not refetch them.
COPY go.mod go.sum ./
COPY wire/go.mod wire/
RUN --mount=type=cache,target=/root/go/pkg/mod go mod download
COPY . .
# Static binaries (the embedded store is pure Go); no VCS stamping without
# .git in the context.
RUN --mount=type=cache,target=/root/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags="-s -w" \
      -o /out/ ./cmd/gateway ./cmd/portcullis-exec-helper

FROM debian:${DEBIAN_RELEASE}-slim AS runtime
# bubblewrap: the sandbox. ca-certificates: https bundle services, JWKS,
# http.get. Nothing else: no shell tools beyond the base image's.
RUN apt-get update \
    && apt-get install -y --no-install-recommends bubblewrap ca-certificates \
    && rm -rf /var/lib/apt/lists/*
# The gateway finds the exec helper beside itself.
COPY --from=build /out/gateway /out/portcullis-exec-helper /usr/local/bin/
# A fixed, unprivileged user: bwrap then sandboxes through unprivileged user
# namespaces. Run as root (--user 0, with the capabilities docs/deploy.md
# lists) for the allowlist network posture and per-call cgroups.
RUN groupadd --system --gid 10001 portcullis \
    && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/portcullis --shell /usr/sbin/nologin portcullis \
    && install -d -o portcullis -g portcullis -m 0700 /var/lib/portcullis \
    && install -d -m 0755 /etc/portcullis
ENV PORTCULLIS_CONFIG=/etc/portcullis/portcullis.yaml \
    PORTCULLIS_DATA_DIR=/var/lib/portcullis \
    PORTCULLIS_LISTEN=0.0.0.0:8080
USER 10001:10001
WORKDIR /var/lib/portcullis
VOLUME ["/var/lib/portcullis"]
EXPOSE 8080
# Liveness from /healthz (no key needed), with bash's /dev/tcp: the image
# carries no HTTP client. With tls: configured, replace it (docs/deploy.md).
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["/bin/bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/${PORTCULLIS_LISTEN##*:} && printf 'GET /healthz HTTP/1.0\\r\\nHost: localhost\\r\\n\\r\\n' >&3 && IFS= read -r status <&3 && [[ $status == *' 200 '* ]]"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/gateway"]
CMD ["serve"]
