# syntax=docker/dockerfile:1
# llm-extproc container image (docs/install.md "Build and push the image").
#
# Three stages from one base image, node:20-bookworm-slim:
# - build: compile the server (tsc) and bundle it with its production dependencies (esbuild,
#   scripts/bundle.mjs): one directory of JavaScript, no node_modules, no source maps.
# - runtime-root: the node binary of that same base and the shared libraries it links, collected
#   into an otherwise empty tree (plus passwd/group, os-release and the dpkg records of those
#   libraries, so image scanners see what is inside).
# - the image: that tree and the bundle, FROM scratch. No shell, no package manager, no npm.
# Why not node:20-bookworm-slim itself (~195 MB, 3/4 of it npm, apt, perl and the rest of Debian
# nothing here runs) or a distroless base from another registry: docs/install.md.

FROM node:20-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
# A registry mirror, when the builder uses one (scripts/install-podman.mjs passes the host npm's).
ARG NPM_REGISTRY=https://registry.npmjs.org/
# A private registry's (or a proxy's) certificate authority arrives as a build secret, never in a
# layer: `--secret id=npm-ca,src=<bundle>` (scripts/install-podman.mjs passes the host npm's cafile).
RUN --mount=type=secret,id=npm-ca \
    --mount=type=cache,target=/root/.npm \
    export NPM_CONFIG_UPDATE_NOTIFIER=false; \
    if [ -s /run/secrets/npm-ca ]; then export NPM_CONFIG_CAFILE=/run/secrets/npm-ca; fi; \
    npm ci --no-audit --no-fund --registry "$NPM_REGISTRY"
COPY tsconfig.json tsconfig.src.json ./
COPY scripts/bundle.mjs scripts/narrow-kube-client.mjs ./scripts/
COPY src ./src
# The Kubernetes client narrowed to what KubeConfig runs (scripts/narrow-kube-client.mjs, also part
# of `npm run build`) before the bundle: otherwise the bundle would carry client-node's generated
# API index, tens of MiB of code the picker never runs. bundle.mjs refuses a dist/ without it.
RUN npx tsc -p tsconfig.src.json && node scripts/narrow-kube-client.mjs && node scripts/bundle.mjs --root /out/app

FROM node:20-bookworm-slim AS runtime-root
# ldd names the libraries node links (and the loader); each is copied to the path the loader looks
# it up by. The packages they come from get their dpkg status entry, as distroless images keep them.
RUN set -eu; \
    out=/out/root; node="$(command -v node)"; \
    mkdir -p "$out/usr/local/bin" "$out/etc" "$out/var/lib/dpkg/status.d" "$out/tmp"; \
    chmod 1777 "$out/tmp"; \
    cp "$node" "$out/usr/local/bin/node"; \
    for lib in $(ldd "$node" | grep -o '/[^ ]*'); do \
      mkdir -p "$out$(dirname "$lib")"; cp -L "$lib" "$out$lib"; \
      pkg="$(dpkg -S "$lib" 2>/dev/null | head -n1 | cut -d: -f1)"; \
      if [ -n "$pkg" ]; then dpkg-query -s "$pkg" > "$out/var/lib/dpkg/status.d/$pkg"; fi; \
    done; \
    cp /usr/lib/os-release "$out/etc/os-release"; \
    if [ -f /etc/nsswitch.conf ]; then cp /etc/nsswitch.conf "$out/etc/"; fi; \
    printf 'root:x:0:0:root:/root:/sbin/nologin\nnode:x:1000:1000:node:/nonexistent:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n' > "$out/etc/passwd"; \
    printf 'root:x:0:\nnode:x:1000:\nnogroup:x:65534:\n' > "$out/etc/group"; \
    "$out/usr/local/bin/node" --version

FROM scratch
COPY --from=runtime-root /out/root/ /
COPY --from=build /out/app/ /app/
ENV NODE_ENV=production
# The Helm chart's node options (values.yaml `nodeOptions`; test/e2e/image.test.ts holds the two
# equal): its heap limit and one V8 background thread, so a container run without the chart
# collects, grows its heap and keeps its threads as the chart's pods do. Node reads both only when
# the process starts, so the entry cannot set them (docs/benchmarks.md, "Memory"). The chart's own
# NODE_OPTIONS replaces this one.
ENV NODE_OPTIONS="--max-old-space-size=160 --v8-pool-size=1"
WORKDIR /app
# Numeric, so Kubernetes' runAsNonRoot can verify it without reading /etc/passwd.
USER 1000:1000
# 9002: gRPC ext_proc + grpc.health.v1; 9090: /metrics, /healthz, /readyz (/debug/endpoints opt-in).
# No HEALTHCHECK: Kubernetes' probes (the chart's /healthz, /readyz) decide.
EXPOSE 9002 9090
ENTRYPOINT ["/usr/local/bin/node", "dist/bundle/main.js"]
CMD ["--config", "/etc/llm-extproc/config.yaml"]
# Last, so a new commit re-labels the image without rebuilding a layer.
ARG VERSION=0.0.0-dev
ARG REVISION=unknown
ARG SOURCE=https://github.com/llm-extproc/llm-extproc
LABEL org.opencontainers.image.title="llm-extproc" \
      org.opencontainers.image.description="Envoy external processor routing OpenAI-compatible LLM requests to ready model-server pods" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="${SOURCE}"
