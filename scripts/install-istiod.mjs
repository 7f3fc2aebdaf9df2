#!/usr/bin/env node
// Builds (or reuses) the real Istio control plane the live-Istio tests run, and the manifests a
// user installs with it, at one pinned istio.io/istio commit:
//
//   ${LLM_EXTPROC_TOOLS_DIR:-$HOME/.cache/llm-extproc}/istio-<version>/
//     pilot-discovery          istiod, `go install istio.io/istio/pilot/cmd/pilot-discovery@<version>`
//     charts/base/             Istio's own CRDs (the `base` chart of that commit)
//     charts/istiod/           the `istiod` chart (istio-discovery): mesh config, injector templates,
//                              the Deployment's flags and environment, rendered by the tests with helm
//     gateway-api-crds.yaml    the Gateway API standard-channel CRDs, from the sigs.k8s.io/gateway-api
//                              version that commit's go.mod requires
//
// Everything comes from the Go module proxy (the only source CI may use). istio.io/istio has no
// replace directives, so `go install` works as is (about 8 minutes on 2 cores with a cold build
// cache, seconds after). The binary is stamped with the version Istio's own build stamps, and is
// reused when it runs and reports it; a build goes to a temporary directory and is renamed, so an
// interrupted build never leaves a half-written binary behind.
//
// Output: one JSON line on stdout {"pilotDiscovery", "baseChart", "istiodChart", "gatewayApiCrds",
// "istioVersion", "gatewayApiVersion"}; progress on stderr. Plain Node ESM without dependencies: it
// runs before the TypeScript build. `--print` only prints the paths and whether they exist.

import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  InstallError,
  buildInStaging,
  goInstallInto,
  goModDownload,
  isExecutable,
  requireGo,
  runInstaller,
  toolsDir,
} from './install-common.mjs';

/** The istio.io/istio commit (master, 2026-08-27; its VERSION file says 1.31) and what it calls itself. */
const ISTIO_MODULE_VERSION = 'v0.0.0-20260827124520-eed52ebb66ad';
const ISTIO_BUILD_VERSION = '1.31-dev';
const ISTIO_GIT_REVISION = 'eed52ebb66ad';
const PILOT_DISCOVERY = 'istio.io/istio/pilot/cmd/pilot-discovery';
const GATEWAY_API_MODULE = 'sigs.k8s.io/gateway-api';

const DIR = join(toolsDir(), `istio-${ISTIO_BUILD_VERSION}-${ISTIO_GIT_REVISION}`);
const paths = {
  pilotDiscovery: join(DIR, 'pilot-discovery'),
  baseChart: join(DIR, 'charts', 'base'),
  istiodChart: join(DIR, 'charts', 'istiod'),
  gatewayApiCrds: join(DIR, 'gateway-api-crds.yaml'),
};

// What Istio's build stamps (common/scripts/report_build_info.sh): `pilot-discovery version` and
// the version istiod announces to proxies and writes into gateway Deployments.
const LDFLAGS = [
  '-s',
  '-w',
  `-X istio.io/istio/pkg/version.buildVersion=${ISTIO_BUILD_VERSION}`,
  `-X istio.io/istio/pkg/version.buildGitRevision=${ISTIO_GIT_REVISION}`,
  '-X istio.io/istio/pkg/version.buildStatus=Clean',
  '-X istio.io/istio/pkg/version.buildHub=docker.io/istio',
].join(' ');

function log(message) {
  process.stderr.write(`install-istiod: ${message}\n`);
}

/** Module downloads run in the tools directory (no go.mod there: module mode without a main module). */
function download(moduleAtVersion) {
  mkdirSync(DIR, { recursive: true });
  return goModDownload(moduleAtVersion, DIR);
}

function reportsVersion(bin) {
  if (!isExecutable(bin)) return false;
  const res = spawnSync(bin, ['version', '--short'], { encoding: 'utf8' });
  // It prints `client version: 1.31-dev`.
  return !res.error && res.status === 0 && `${res.stdout}`.trim().split(/\s+/).at(-1) === ISTIO_BUILD_VERSION;
}

function installPilotDiscovery() {
  if (reportsVersion(paths.pilotDiscovery)) return;
  log(`building ${PILOT_DISCOVERY}@${ISTIO_MODULE_VERSION} (about 8 minutes on 2 cores the first time)`);
  const seconds = buildInStaging(paths.pilotDiscovery, (staging) =>
    goInstallInto(staging, `${PILOT_DISCOVERY}@${ISTIO_MODULE_VERSION}`, LDFLAGS),
  );
  log(`built pilot-discovery in ${seconds} s`);
  if (!reportsVersion(paths.pilotDiscovery)) {
    throw new InstallError(`built ${paths.pilotDiscovery} but \`pilot-discovery version --short\` does not say ${ISTIO_BUILD_VERSION}`);
  }
}

/** Copies a directory of the module to `target` through a temporary name (module files are read-only). */
function copyTree(source, target) {
  if (!existsSync(source)) throw new InstallError(`${source} is missing from the downloaded module`);
  const partial = `${target}.partial`;
  rmSync(partial, { recursive: true, force: true });
  mkdirSync(join(target, '..'), { recursive: true });
  cpSync(source, partial, { recursive: true });
  renameSync(partial, target);
}

function installCharts(istioDir) {
  if (!existsSync(join(paths.baseChart, 'Chart.yaml'))) copyTree(join(istioDir, 'manifests', 'charts', 'base'), paths.baseChart);
  if (!existsSync(join(paths.istiodChart, 'Chart.yaml'))) {
    copyTree(join(istioDir, 'manifests', 'charts', 'istio-control', 'istio-discovery'), paths.istiodChart);
  }
}

/** The sigs.k8s.io/gateway-api version istio's go.mod requires. */
function gatewayApiVersion(istioGoMod) {
  const match = readFileSync(istioGoMod, 'utf8').match(/^\s*sigs\.k8s\.io\/gateway-api\s+(v\S+)\s*$/m);
  if (match === null) throw new InstallError(`${istioGoMod} requires no ${GATEWAY_API_MODULE}`);
  return match[1];
}

function installGatewayApiCrds(version) {
  if (existsSync(paths.gatewayApiCrds)) return;
  log(`fetching the Gateway API standard CRDs from ${GATEWAY_API_MODULE}@${version}`);
  const dir = join(download(`${GATEWAY_API_MODULE}@${version}`).Dir, 'config', 'crd', 'standard');
  const files = readdirSync(dir)
    .filter((f) => f.endsWith('.yaml'))
    .sort();
  if (!files.some((f) => f.includes('_httproutes'))) throw new InstallError(`no HTTPRoute CRD in ${dir}`);
  const text = files.map((f) => `# ${GATEWAY_API_MODULE}@${version} config/crd/standard/${f}\n${readFileSync(join(dir, f), 'utf8')}`);
  writeFileSync(`${paths.gatewayApiCrds}.partial`, text.join('\n---\n'));
  renameSync(`${paths.gatewayApiCrds}.partial`, paths.gatewayApiCrds);
}

/** Written last: when it exists and the binary reports its version, nothing needs Go. */
const MANIFEST = join(DIR, 'installed.json');

function main() {
  if (process.argv.includes('--print')) {
    const present = Object.fromEntries(Object.entries(paths).map(([k, p]) => [k, existsSync(p)]));
    return JSON.stringify({ ...paths, present });
  }
  if (existsSync(MANIFEST) && Object.values(paths).every((p) => existsSync(p)) && reportsVersion(paths.pilotDiscovery))
    return readFileSync(MANIFEST, 'utf8').trim();
  requireGo('istiod (pilot-discovery); Go 1.26 or newer');
  const istio = download(`istio.io/istio@${ISTIO_MODULE_VERSION}`);
  const gatewayApi = gatewayApiVersion(istio.GoMod);
  installCharts(istio.Dir);
  installGatewayApiCrds(gatewayApi);
  installPilotDiscovery();
  const result = JSON.stringify({ ...paths, istioVersion: ISTIO_BUILD_VERSION, gatewayApiVersion: gatewayApi });
  writeFileSync(MANIFEST, `${result}\n`);
  return result;
}

runInstaller('install-istiod', main);
