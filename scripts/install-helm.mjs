#!/usr/bin/env node
// Makes sure a Helm v3.22.0 binary is available for the chart tests and prints its path.
//
// Order: $HELM_BIN (if set it must be executable; an explicit choice is never silently ignored),
// then the tools cache `${LLM_EXTPROC_TOOLS_DIR:-$HOME/.cache/llm-extproc}/helm-v3.22.0/helm`,
// then a fresh build with `go install helm.sh/helm/v3/cmd/helm@v3.22.0` (the Go module proxy is
// the only source CI may use; about 2 minutes on a 2-core machine). The cache lives outside the
// clone so every clone and CI run on the machine reuses one build.
//
// Plain Node ESM with no dependencies because it runs before the TypeScript build exists.
// Quiet on success except one stdout line with the binary path; exit code 1 with a message on failure.

import { join } from 'node:path';
import { buildInStaging, goInstallInto, pinnedBinary, requireGo, runCaptured, runInstaller, toolsDir } from './install-common.mjs';

const HELM_VERSION = 'v3.22.0';
const HELM_MODULE = 'helm.sh/helm/v3/cmd/helm';
// What helm's own Makefile stamps in with -ldflags: without them `helm version` says "v3.22" and
// the default Kubernetes version (.Capabilities.KubeVersion, lint deprecations) is 1.20. Helm
// v3.22 is built against client-go v0.37, i.e. Kubernetes 1.37.
const LDFLAGS = [
  '-s',
  '-w',
  `-X helm.sh/helm/v3/internal/version.version=${HELM_VERSION}`,
  '-X helm.sh/helm/v3/internal/version.gitTreeState=clean',
  '-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1',
  '-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=37',
  '-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1',
  '-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=37',
].join(' ');

/** True when the binary runs and reports the wanted version (stamped in by LDFLAGS). */
function hasWantedVersion(bin) {
  const res = runCaptured(bin, ['version', '--short']);
  if (res.error || res.status !== 0) return false;
  return `${res.stdout}`.trim().startsWith(HELM_VERSION);
}

function main() {
  return pinnedBinary({
    envVar: 'HELM_BIN',
    target: join(toolsDir(), `helm-${HELM_VERSION}`, 'helm'),
    version: HELM_VERSION,
    reportsVersion: hasWantedVersion,
    build: (target) => {
      requireGo(`helm ${HELM_VERSION} (or point HELM_BIN at a helm v3 binary)`);
      buildInStaging(target, (staging) => goInstallInto(staging, `${HELM_MODULE}@${HELM_VERSION}`, LDFLAGS, { inherit: false }));
    },
  });
}

runInstaller('install-helm', main);
