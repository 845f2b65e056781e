# The two images, one target each (`make images`: docker build --target
# apiserver|podagent, build context the repository root). One build stage
# compiles both binaries with the flags of `make build` (CGO_ENABLED=0 go
# build -trimpath), so the second target reuses the first's cache. Both run
# on a slim Debian with git (the API hydrates durable .git archives and
# serves smart-HTTP with git itself; the pod agent shells out to git and
# git-lfs) as the non-root user 65532, as the chart's securityContext expects.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY shared/go.mod shared/go.sum shared/
COPY migrations/go.mod migrations/go.sum migrations/
COPY apiserver/go.mod apiserver/go.sum apiserver/
COPY podagent/go.mod podagent/go.sum podagent/
RUN for m in apiserver podagent; do (cd $m && GOWORK=off go mod download) || exit 1; done
COPY shared/ shared/
COPY migrations/ migrations/
COPY apiserver/ apiserver/
COPY podagent/ podagent/
RUN for m in apiserver podagent; do \
      (cd $m && GOWORK=off CGO_ENABLED=0 go build -trimpath -o /out/$m ./cmd/$m) || exit 1; \
    done

FROM debian:bookworm-slim AS runtime
RUN apt-get update && apt-get install -y --no-install-recommends git git-lfs ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd -g 65532 svc && useradd -u 65532 -g 65532 -M -d /tmp -s /usr/sbin/nologin svc
USER 65532:65532

# The API server (ghcr.io/svc-dev/svc-apiserver).
FROM runtime AS apiserver
COPY --from=build /out/apiserver /usr/local/bin/apiserver
ENTRYPOINT ["/usr/local/bin/apiserver"]
CMD ["serve"]

# The pod agent, the native sidecar of every runtime pod (ghcr.io/svc-dev/svc-podagent).
FROM runtime AS podagent
COPY --from=build /out/podagent /usr/local/bin/podagent
ENTRYPOINT ["/usr/local/bin/podagent"]
CMD ["serve"]
