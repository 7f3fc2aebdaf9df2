# llm-extproc container image: build the TypeScript once, ship only the runtime.
FROM node:20-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json ./
COPY src ./src
COPY tools ./tools
COPY scripts ./scripts
COPY test ./test
# npm run build: tsc, then the Kubernetes client narrowed to what KubeConfig runs
# (scripts/narrow-kube-client.mjs): without that step the image would load client-node's generated
# API index, tens of MiB the picker never runs.
RUN npm run build --silent

FROM node:20-bookworm-slim
ENV NODE_ENV=production
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund && npm cache clean --force
# The server's own codec needs no .proto files at run time (proto/ is the tests' oracle), and
# build-time code (tools/: the Envoy config renderer, the error-docs generator) compiles to
# dist/tools, which is not copied.
COPY --from=build /app/dist/src ./dist/src
USER node
# 9002: gRPC ext_proc + grpc.health.v1; 9090: /metrics, /healthz, /readyz, /debug/endpoints
EXPOSE 9002 9090
ENTRYPOINT ["node", "dist/src/main.js"]
CMD ["--config", "/etc/llm-extproc/config.yaml"]
