#!/usr/bin/env node
// Builds (or reuses) the real Envoy Gateway controller the live gateway tests run, and renders the
// CRDs it needs (Gateway API + Envoy Gateway's own), both at pinned versions from the Go module
// proxy:
//
//   ${LLM_EXTPROC_TOOLS_DIR:-$HOME/.cache/llm-extproc}/envoy-gateway-v1.9.1/envoy-gateway
//   ${LLM_EXTPROC_TOOLS_DIR:-$HOME/.cache/llm-extproc}/envoy-gateway-v1.9.1/crds.yaml
//
// The controller: `go install github.com/envoyproxy/gateway/cmd/envoy-gateway@v1.9.1` (the module
// has no replace directives, so no wrapper module is needed); a cold Go build cache makes it about
// 7.5 min on 2 idle cores (README). The CRDs: the module's own `charts/gateway-crds-helm`, rendered by our
// pinned Helm (scripts/install-helm.mjs) with the Gateway API (experimental channel, Envoy
// Gateway's default) and the Envoy Gateway CRDs switched on — the same manifests `helm install
// eg-crds oci://docker.io/envoyproxy/gateway-crds-helm` applies. A binary is reused when it reports
// the pinned version; every write goes to a temporary name first and is renamed at the end.
//
// Output: one JSON line on stdout, {"envoyGateway": path, "crds": path}. Progress on stderr.
// Plain Node ESM without dependencies: it runs before the TypeScript build exists.

import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  InstallError,
  buildInStaging,
  describeFailure,
  goInstallInto,
  goModDownload,
  isExecutable,
  requireGo,
  runCaptured,
  runInstaller,
  toolsDir,
} from './install-common.mjs';

const VERSION = 'v1.9.1';
const MODULE = 'github.com/envoyproxy/gateway';
const PACKAGE = `${MODULE}/cmd/envoy-gateway`;
/** What Envoy Gateway's Makefile stamps in; without it `envoy-gateway version` reports an empty version. */
const LDFLAGS = `-s -w -X ${MODULE}/internal/cmd/version.envoyGatewayVersion=${VERSION}`;
const CRDS_CHART = 'charts/gateway-crds-helm';

const dir = join(toolsDir(), `envoy-gateway-${VERSION}`);
const paths = { envoyGateway: join(dir, 'envoy-gateway'), crds: join(dir, 'crds.yaml') };

function log(message) {
  process.stderr.write(`install-envoy-gateway: ${message}\n`);
}

function hasWantedVersion(bin) {
  if (!isExecutable(bin)) return false;
  const res = runCaptured(bin, ['version']);
  return res.status === 0 && `${res.stdout}`.includes(`ENVOY_GATEWAY_VERSION: ${VERSION}`);
}

function buildController() {
  if (hasWantedVersion(paths.envoyGateway)) return;
  log(requireGo(`envoy-gateway ${VERSION}`));
  log(`building envoy-gateway ${VERSION} with go install (minutes the first time: a cold build is about as long as istiod's)`);
  const seconds = buildInStaging(paths.envoyGateway, (staging) => goInstallInto(staging, `${PACKAGE}@${VERSION}`, LDFLAGS));
  log(`built in ${seconds} s`);
  if (!hasWantedVersion(paths.envoyGateway)) {
    throw new InstallError(`built ${paths.envoyGateway} but \`envoy-gateway version\` does not report ${VERSION}`);
  }
}

/** Our pinned Helm, built or found by its own installer. */
function helmBinary() {
  const script = join(dirname(fileURLToPath(import.meta.url)), 'install-helm.mjs');
  const res = spawnSync(process.execPath, [script], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] });
  if (res.error || res.status !== 0) throw new InstallError(`scripts/install-helm.mjs failed: ${describeFailure(res)}`);
  return res.stdout.trim().split('\n').at(-1);
}

function renderCrds() {
  if (existsSync(paths.crds)) return;
  requireGo(`the CRDs of envoy-gateway ${VERSION}`);
  log(`rendering the Gateway API and Envoy Gateway CRDs from ${MODULE}@${VERSION}/${CRDS_CHART}`);
  const moduleDir = goModDownload(`${MODULE}@${VERSION}`, dir).Dir;
  const chart = join(moduleDir, CRDS_CHART);
  if (!existsSync(chart)) throw new InstallError(`${chart} is missing from the downloaded module`);
  // Helm writes its cache and config next to nothing of the user's: a private, throw-away home.
  const home = mkdtempSync(join(dir, '.helm-'));
  try {
    const env = { ...process.env, HELM_CACHE_HOME: join(home, 'c'), HELM_CONFIG_HOME: join(home, 'f'), HELM_DATA_HOME: join(home, 'd') };
    const args = ['template', 'eg-crds', chart, '--set', 'crds.gatewayAPI.enabled=true,crds.envoyGateway.enabled=true'];
    const res = runCaptured(helmBinary(), args, env);
    if (res.error || res.status !== 0) throw new InstallError(`helm ${args.join(' ')}: ${describeFailure(res)}`);
    const count = (res.stdout.match(/^kind: CustomResourceDefinition$/gm) ?? []).length;
    if (count < 20) throw new InstallError(`helm rendered ${count} CRDs from ${chart}; expected the Gateway API and Envoy Gateway sets`);
    writeFileSync(`${paths.crds}.partial`, res.stdout);
    renameSync(`${paths.crds}.partial`, paths.crds);
  } finally {
    rmSync(home, { recursive: true, force: true });
  }
}

function main() {
  mkdirSync(dir, { recursive: true });
  buildController();
  renderCrds();
  return JSON.stringify(paths);
}

runInstaller('install-envoy-gateway', main);
