#!/usr/bin/env node
// Builds (or reuses) the real Kubernetes control plane the test bed runs: kube-apiserver and etcd,
// compiled with the machine's Go from the Go module proxy at pinned versions, plus the CRD
// manifests of every kind the chart renders or the server watches, each from its project's own Go
// module: InferencePool and InferenceObjective (Gateway API Inference Extension), Envoy Gateway's gateway.envoyproxy.io kinds, and the
// Prometheus operator's ServiceMonitor and PrometheusRule. (Istio's come with istiod's base chart,
// scripts/install-istiod.mjs.) One exception: llm-d's llm-d.ai/v1alpha2 InferenceObjective and
// InferenceModelRewrite are not fetched here, because the Go module proxy refuses
// github.com/llm-d/llm-d-router (403); the test bed installs our transcription of llm-d's generated
// CRDs at commit ebab687 instead (test/support/crds/llm-d.ai-v1alpha2.yaml, which says what it keeps).
//
// Everything lands outside the clone, in `${LLM_EXTPROC_TOOLS_DIR:-$HOME/.cache/llm-extproc}`:
//   kube-apiserver-v1.34.3/kube-apiserver
//   etcd-v3.6.5/etcd
//   gateway-api-inference-extension-v1.0.1/inferencepools.yaml
//   gateway-api-inference-extension-v1.0.1/inferenceobjectives.yaml
//   envoy-gateway-v1.9.1/gateway.envoyproxy.io-crds.yaml
//   prometheus-operator-v0.85.0/monitoring.coreos.com-crds.yaml
// A binary is reused when it exists and reports the pinned version; a build writes to a temporary
// name and renames at the end, so an interrupted build never leaves a half-written binary behind.
// Go's own caches (module cache, build cache) stay at Go's defaults, also outside the clone, so a
// second run after a partial failure is quick.
//
// `go install` refuses modules with replace directives (k8s.io/kubernetes has one per staging
// module), so kube-apiserver builds from a small wrapper module that requires k8s.io/kubernetes and
// maps every k8s.io/* staging module to its v0.x release; etcd likewise wraps etcdmain.
//
// Output: one JSON line on stdout, {"kubeApiserver", "etcd", "inferencePoolCrd", "inferenceObjectiveCrd",
// "envoyGatewayCrds", "prometheusOperatorCrds"}: paths.
// Progress goes to stderr. Plain Node ESM without dependencies: it runs before the TypeScript build.
// Options: --print (do nothing but print where the files would be, and whether they are present).

import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, readFileSync, readdirSync, renameSync, writeFileSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import {
  InstallError,
  buildInStaging,
  goModDownload,
  isExecutable,
  requireGo,
  runChecked,
  runInstaller,
  toolsDir,
} from './install-common.mjs';

const KUBERNETES_VERSION = 'v1.34.3';
/** The staging modules (k8s.io/api, k8s.io/apiserver, ...) are released as v0.<minor>.<patch>. */
const STAGING_VERSION = 'v0.34.3';
const ETCD_VERSION = 'v3.6.5';
const INFERENCE_EXTENSION_VERSION = 'v1.0.1';
const INFERENCE_POOL_CRD_FILE = 'config/crd/bases/inference.networking.k8s.io_inferencepools.yaml';
/** InferenceObjective (inference.networking.x-k8s.io/v1alpha2): the priorities flow control reads. */
const INFERENCE_OBJECTIVE_CRD_FILE = 'config/crd/bases/inference.networking.x-k8s.io_inferenceobjectives.yaml';
/** The Envoy Gateway release whose controller the gateway tests run (same pin as its installer). */
const ENVOY_GATEWAY_VERSION = 'v1.9.1';
/** Envoy Gateway's own CRDs as its gateway-crds-helm chart ships them: one template per CRD. */
const ENVOY_GATEWAY_CRD_DIR = 'charts/gateway-crds-helm/templates/generated';
const PROMETHEUS_OPERATOR_VERSION = 'v0.85.0';
/** The two Prometheus operator kinds the chart renders (metrics.serviceMonitor, metrics.prometheusRule). */
const PROMETHEUS_OPERATOR_CRD_FILES = [
  'example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml',
  'example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml',
];

const TOOLS_DIR = toolsDir();

const paths = {
  kubeApiserver: join(TOOLS_DIR, `kube-apiserver-${KUBERNETES_VERSION}`, 'kube-apiserver'),
  etcd: join(TOOLS_DIR, `etcd-${ETCD_VERSION}`, 'etcd'),
  inferencePoolCrd: join(TOOLS_DIR, `gateway-api-inference-extension-${INFERENCE_EXTENSION_VERSION}`, 'inferencepools.yaml'),
  inferenceObjectiveCrd: join(TOOLS_DIR, `gateway-api-inference-extension-${INFERENCE_EXTENSION_VERSION}`, 'inferenceobjectives.yaml'),
  envoyGatewayCrds: join(TOOLS_DIR, `envoy-gateway-${ENVOY_GATEWAY_VERSION}`, 'gateway.envoyproxy.io-crds.yaml'),
  prometheusOperatorCrds: join(TOOLS_DIR, `prometheus-operator-${PROMETHEUS_OPERATOR_VERSION}`, 'monitoring.coreos.com-crds.yaml'),
};

function log(message) {
  process.stderr.write(`install-kube: ${message}\n`);
}

function versionOutput(bin) {
  const res = spawnSync(bin, ['--version'], { encoding: 'utf8' });
  if (res.error || res.status !== 0) return '';
  return `${res.stdout}${res.stderr}`;
}

function ready(bin, versionText) {
  return isExecutable(bin) && versionOutput(bin).includes(versionText);
}

/**
 * Builds a wrapper module (`files`: name → text, go.mod among them) into `bin`, in a staging
 * directory renamed into place (install-common.mjs).
 */
function buildWrapper(bin, files, ldflags) {
  const seconds = buildInStaging(bin, (staging) => {
    for (const [name, text] of Object.entries(files)) writeFileSync(join(staging, name), text);
    runChecked('go', ['mod', 'tidy'], { cwd: staging, inherit: true });
    runChecked('go', ['build', '-trimpath', `-ldflags=${ldflags}`, '-o', basename(bin), '.'], { cwd: staging, inherit: true });
    return join(staging, basename(bin));
  });
  log(`built ${basename(bin)} in ${seconds} s`);
}

function installEtcd() {
  const bin = paths.etcd;
  if (ready(bin, `etcd Version: ${ETCD_VERSION.slice(1)}`)) return;
  log(`building etcd ${ETCD_VERSION} (about a minute on 2 cores)`);
  const mainGo = [
    "// Wrapper so etcd builds from the module proxy: etcd's own main module has replace directives.",
    'package main',
    '',
    'import (',
    '\t"os"',
    '',
    '\t"go.etcd.io/etcd/server/v3/etcdmain"',
    ')',
    '',
    'func main() { etcdmain.Main(os.Args) }',
    '',
  ].join('\n');
  const goMod = `module llm-extproc.local/etcd\n\ngo 1.24\n\nrequire go.etcd.io/etcd/server/v3 ${ETCD_VERSION}\n`;
  buildWrapper(bin, { 'go.mod': goMod, 'main.go': mainGo }, '-s -w');
  if (!ready(bin, `etcd Version: ${ETCD_VERSION.slice(1)}`)) {
    throw new InstallError(`built ${bin} but its --version does not say ${ETCD_VERSION}:\n${versionOutput(bin)}`);
  }
}

/** The staging modules kubernetes replaces with ./staging/src/k8s.io/<name>, read from its go.mod. */
function stagingModules(kubernetesGoMod) {
  const text = readFileSync(kubernetesGoMod, 'utf8');
  const names = new Set();
  for (const match of text.matchAll(/^\s*(?:replace\s+)?(k8s\.io\/[\w.-]+)\s+=>\s+\.\/staging\/src\//gm)) {
    names.add(match[1]);
  }
  if (names.size === 0) throw new InstallError(`no staging replace directives found in ${kubernetesGoMod}`);
  return [...names].sort();
}

function installKubeApiserver() {
  const bin = paths.kubeApiserver;
  if (ready(bin, `Kubernetes ${KUBERNETES_VERSION}`)) return;
  log(`building kube-apiserver ${KUBERNETES_VERSION} (about 10 minutes on 2 cores)`);
  mkdirSync(dirname(bin), { recursive: true });
  const info = goModDownload(`k8s.io/kubernetes@${KUBERNETES_VERSION}`, dirname(bin));
  const staging = stagingModules(info.GoMod);
  const replaces = staging.map((name) => `\t${name} => ${name} ${STAGING_VERSION}`).join('\n');
  const goMod = `module llm-extproc.local/kube-apiserver\n\ngo 1.24\n\nrequire k8s.io/kubernetes ${KUBERNETES_VERSION}\n\nreplace (\n${replaces}\n)\n`;
  const mainGo = [
    '// Wrapper so kube-apiserver builds from the module proxy: k8s.io/kubernetes replaces its staging',
    '// modules with local paths, which go install refuses; go.mod here maps them to their releases.',
    'package main',
    '',
    'import (',
    '\t"os"',
    '',
    '\t"k8s.io/component-base/cli"',
    '\t"k8s.io/kubernetes/cmd/kube-apiserver/app"',
    ')',
    '',
    'func main() { os.Exit(cli.Run(app.NewAPIServerCommand())) }',
    '',
  ].join('\n');
  // Without these the binary reports v0.0.0-master, and the version check above could never pass.
  const [major, minor] = KUBERNETES_VERSION.slice(1).split('.');
  const pkg = 'k8s.io/component-base/version';
  const ldflags = [
    '-s -w',
    `-X ${pkg}.gitVersion=${KUBERNETES_VERSION}`,
    `-X ${pkg}.gitMajor=${major}`,
    `-X ${pkg}.gitMinor=${minor}`,
    `-X ${pkg}.gitTreeState=clean`,
    `-X ${pkg}.buildDate=1970-01-01T00:00:00Z`,
  ].join(' ');
  buildWrapper(bin, { 'go.mod': goMod, 'main.go': mainGo }, ldflags);
  if (!ready(bin, `Kubernetes ${KUBERNETES_VERSION}`)) {
    throw new InstallError(`built ${bin} but its --version does not say ${KUBERNETES_VERSION}:\n${versionOutput(bin)}`);
  }
}

/** The InferencePool and InferenceObjective CRDs, both from the one pinned module. */
function installInferenceExtensionCrds() {
  const wanted = [
    { target: paths.inferencePoolCrd, file: INFERENCE_POOL_CRD_FILE },
    { target: paths.inferenceObjectiveCrd, file: INFERENCE_OBJECTIVE_CRD_FILE },
  ].filter(({ target }) => !existsSync(target));
  if (wanted.length === 0) return;
  const dir = dirname(paths.inferencePoolCrd);
  log(
    `fetching the InferencePool and InferenceObjective CRDs from sigs.k8s.io/gateway-api-inference-extension@${INFERENCE_EXTENSION_VERSION}`,
  );
  mkdirSync(dir, { recursive: true });
  const info = goModDownload(`sigs.k8s.io/gateway-api-inference-extension@${INFERENCE_EXTENSION_VERSION}`, dir);
  for (const { target, file } of wanted) {
    const source = join(info.Dir, file);
    if (!existsSync(source)) throw new InstallError(`${source} is missing from the downloaded module`);
    copyFileSync(source, `${target}.partial`);
    renameSync(`${target}.partial`, target);
  }
}

/** Writes `parts` as one YAML stream at `target`, through a temporary name. */
function writeManifests(target, parts) {
  const documents = parts.map((text) => text.trim().replace(/^---\n/, ''));
  writeFileSync(`${target}.partial`, `${documents.join('\n---\n')}\n`);
  renameSync(`${target}.partial`, target);
}

function installEnvoyGatewayCrds() {
  const target = paths.envoyGatewayCrds;
  if (existsSync(target)) return;
  log(`fetching the gateway.envoyproxy.io CRDs from github.com/envoyproxy/gateway@${ENVOY_GATEWAY_VERSION}`);
  mkdirSync(join(target, '..'), { recursive: true });
  const info = goModDownload(`github.com/envoyproxy/gateway@${ENVOY_GATEWAY_VERSION}`, join(target, '..'));
  const dir = join(info.Dir, ENVOY_GATEWAY_CRD_DIR);
  const files = existsSync(dir) ? readdirSync(dir).filter((f) => f.startsWith('gateway.envoyproxy.io_') && f.endsWith('.yaml')) : [];
  if (files.length === 0) throw new InstallError(`no gateway.envoyproxy.io CRDs in ${dir}`);
  // Each template is the CRD inside `{{- if .Values.crds.envoyGateway.enabled }} ... {{- end }}`
  // and nothing else: what `helm template` gives with that value on is the text between the two.
  const parts = files.sort().map((file) => {
    const lines = readFileSync(join(dir, file), 'utf8').trimEnd().split('\n');
    const inner = lines.slice(1, -1);
    if (
      !/^\{\{-? if .*\}\}$/.test(lines[0] ?? '') ||
      !/^\{\{-? end -?\}\}$/.test(lines.at(-1) ?? '') ||
      inner.some((l) => l.includes('{{'))
    ) {
      throw new InstallError(`${file} is not one CRD wrapped in a single if/end (a newer Envoy Gateway layout?)`);
    }
    return inner.join('\n');
  });
  writeManifests(target, parts);
}

function installPrometheusOperatorCrds() {
  const target = paths.prometheusOperatorCrds;
  if (existsSync(target)) return;
  log(
    `fetching the ServiceMonitor and PrometheusRule CRDs from github.com/prometheus-operator/prometheus-operator@${PROMETHEUS_OPERATOR_VERSION}`,
  );
  mkdirSync(join(target, '..'), { recursive: true });
  const info = goModDownload(`github.com/prometheus-operator/prometheus-operator@${PROMETHEUS_OPERATOR_VERSION}`, join(target, '..'));
  const parts = PROMETHEUS_OPERATOR_CRD_FILES.map((file) => {
    const source = join(info.Dir, file);
    if (!existsSync(source)) throw new InstallError(`${source} is missing from the downloaded module`);
    return readFileSync(source, 'utf8');
  });
  writeManifests(target, parts);
}

function main() {
  if (process.argv.includes('--print')) {
    const present = Object.fromEntries(Object.entries(paths).map(([k, p]) => [k, existsSync(p)]));
    process.stdout.write(`${JSON.stringify({ ...paths, present })}\n`);
    return;
  }
  const missing =
    !existsSync(paths.inferencePoolCrd) ||
    !existsSync(paths.inferenceObjectiveCrd) ||
    !existsSync(paths.envoyGatewayCrds) ||
    !existsSync(paths.prometheusOperatorCrds) ||
    !ready(paths.etcd, `etcd Version: ${ETCD_VERSION.slice(1)}`) ||
    !ready(paths.kubeApiserver, `Kubernetes ${KUBERNETES_VERSION}`);
  if (missing) log(requireGo('kube-apiserver and etcd (Go 1.24 or newer)'));
  installInferenceExtensionCrds();
  installEnvoyGatewayCrds();
  installPrometheusOperatorCrds();
  installEtcd();
  installKubeApiserver();
  process.stdout.write(`${JSON.stringify(paths)}\n`);
}

runInstaller('install-kube', main);
