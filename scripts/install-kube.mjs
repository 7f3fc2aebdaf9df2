#!/usr/bin/env node
// Builds (or reuses) the real Kubernetes control plane the test bed runs: kube-apiserver and etcd,
// compiled with the machine's Go from the Go module proxy at pinned versions, plus the
// InferencePool CRD manifest from the Gateway API Inference Extension module.
//
// Everything lands outside the clone, in `${LLM_EXTPROC_TOOLS_DIR:-$HOME/.cache/llm-extproc}`:
//   kube-apiserver-v1.34.3/kube-apiserver
//   etcd-v3.6.5/etcd
//   gateway-api-inference-extension-v1.0.1/inferencepools.yaml
// A binary is reused when it exists and reports the pinned version; a build writes to a temporary
// name and renames at the end, so an interrupted build never leaves a half-written binary behind.
// Go's own caches (module cache, build cache) stay at Go's defaults, also outside the clone, so a
// second run after a partial failure is quick.
//
// `go install` refuses modules with replace directives (k8s.io/kubernetes has one per staging
// module), so kube-apiserver builds from a small wrapper module that requires k8s.io/kubernetes and
// maps every k8s.io/* staging module to its v0.x release; etcd likewise wraps etcdmain.
//
// Output: one JSON line on stdout, {"kubeApiserver": path, "etcd": path, "inferencePoolCrd": path}.
// Progress goes to stderr. Plain Node ESM without dependencies: it runs before the TypeScript build.
// Options: --print (do nothing but print where the files would be, and whether they are present).

import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { InstallError, goModDownload, isExecutable, runChecked, runInstaller, toolsDir } from './install-common.mjs';

const KUBERNETES_VERSION = 'v1.34.3';
/** The staging modules (k8s.io/api, k8s.io/apiserver, ...) are released as v0.<minor>.<patch>. */
const STAGING_VERSION = 'v0.34.3';
const ETCD_VERSION = 'v3.6.5';
const INFERENCE_EXTENSION_VERSION = 'v1.0.1';
const INFERENCE_POOL_CRD_FILE = 'config/crd/bases/inference.networking.k8s.io_inferencepools.yaml';

const TOOLS_DIR = toolsDir();

const paths = {
  kubeApiserver: join(TOOLS_DIR, `kube-apiserver-${KUBERNETES_VERSION}`, 'kube-apiserver'),
  etcd: join(TOOLS_DIR, `etcd-${ETCD_VERSION}`, 'etcd'),
  inferencePoolCrd: join(TOOLS_DIR, `gateway-api-inference-extension-${INFERENCE_EXTENSION_VERSION}`, 'inferencepools.yaml'),
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

/** A fresh scratch module directory next to the target, removed on success. */
function scratchDir(target, name) {
  const dir = join(target, '..', `.build-${name}`);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  return dir;
}

function buildInto(dir, bin, ldflags) {
  const partial = `${bin}.partial`;
  runChecked('go', ['mod', 'tidy'], { cwd: dir, inherit: true });
  runChecked('go', ['build', '-trimpath', `-ldflags=${ldflags}`, '-o', partial, '.'], { cwd: dir, inherit: true });
  renameSync(partial, bin);
  rmSync(dir, { recursive: true, force: true });
}

function installEtcd() {
  const bin = paths.etcd;
  if (ready(bin, `etcd Version: ${ETCD_VERSION.slice(1)}`)) return;
  log(`building etcd ${ETCD_VERSION} (about a minute on 2 cores)`);
  const dir = scratchDir(bin, 'etcd');
  writeFileSync(join(dir, 'go.mod'), `module llm-extproc.local/etcd\n\ngo 1.24\n\nrequire go.etcd.io/etcd/server/v3 ${ETCD_VERSION}\n`);
  writeFileSync(
    join(dir, 'main.go'),
    [
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
    ].join('\n'),
  );
  buildInto(dir, bin, '-s -w');
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
  const dir = scratchDir(bin, 'kube-apiserver');
  const info = goModDownload(`k8s.io/kubernetes@${KUBERNETES_VERSION}`, dir);
  const staging = stagingModules(info.GoMod);
  const replaces = staging.map((name) => `\t${name} => ${name} ${STAGING_VERSION}`).join('\n');
  writeFileSync(
    join(dir, 'go.mod'),
    `module llm-extproc.local/kube-apiserver\n\ngo 1.24\n\nrequire k8s.io/kubernetes ${KUBERNETES_VERSION}\n\nreplace (\n${replaces}\n)\n`,
  );
  writeFileSync(
    join(dir, 'main.go'),
    [
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
    ].join('\n'),
  );
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
  buildInto(dir, bin, ldflags);
  if (!ready(bin, `Kubernetes ${KUBERNETES_VERSION}`)) {
    throw new InstallError(`built ${bin} but its --version does not say ${KUBERNETES_VERSION}:\n${versionOutput(bin)}`);
  }
}

function installInferencePoolCrd() {
  const target = paths.inferencePoolCrd;
  if (existsSync(target)) return;
  log(`fetching the InferencePool CRD from sigs.k8s.io/gateway-api-inference-extension@${INFERENCE_EXTENSION_VERSION}`);
  mkdirSync(join(target, '..'), { recursive: true });
  const info = goModDownload(`sigs.k8s.io/gateway-api-inference-extension@${INFERENCE_EXTENSION_VERSION}`, join(target, '..'));
  const source = join(info.Dir, INFERENCE_POOL_CRD_FILE);
  if (!existsSync(source)) throw new InstallError(`${source} is missing from the downloaded module`);
  copyFileSync(source, `${target}.partial`);
  renameSync(`${target}.partial`, target);
}

function requireGo() {
  const res = spawnSync('go', ['version'], { encoding: 'utf8' });
  if (res.error || res.status !== 0) {
    throw new InstallError('the Go toolchain (`go`) is needed to build kube-apiserver and etcd; install Go 1.24 or newer');
  }
  log(res.stdout.trim());
}

function main() {
  if (process.argv.includes('--print')) {
    const present = Object.fromEntries(Object.entries(paths).map(([k, p]) => [k, existsSync(p)]));
    process.stdout.write(`${JSON.stringify({ ...paths, present })}\n`);
    return;
  }
  const missing =
    !existsSync(paths.inferencePoolCrd) ||
    !ready(paths.etcd, `etcd Version: ${ETCD_VERSION.slice(1)}`) ||
    !ready(paths.kubeApiserver, `Kubernetes ${KUBERNETES_VERSION}`);
  if (missing) requireGo();
  installInferencePoolCrd();
  installEtcd();
  installKubeApiserver();
  process.stdout.write(`${JSON.stringify(paths)}\n`);
}

runInstaller('install-kube', main);
