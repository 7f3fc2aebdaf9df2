#!/usr/bin/env node
// Makes sure an OpenTelemetry Collector (release v0.161.0) with the OTLP receiver and the file
// exporter is available for the tracing tests, and prints its path.
//
// Order: $OTELCOL_BIN (if set it must be executable; an explicit choice is never silently ignored),
// then the tools cache `${LLM_EXTPROC_TOOLS_DIR:-$HOME/.cache/llm-extproc}/otelcol-v0.161.0/otelcol-llm-extproc`,
// then a fresh build with the collector's own builder (`go.opentelemetry.io/collector/cmd/builder`,
// installed with `go install` from the Go module proxy, the only source CI may use) from a
// manifest naming exactly those two components. One release everywhere: the builder, the OTLP
// receiver (core) and the file exporter (contrib) are all v0.161.0, the newest release whose
// contrib file exporter the module proxy serves and builds with this Go. About 4 minutes on a
// 2-core machine with a cold Go cache (see the README). The cache lives outside the clone so every
// clone and CI run on the machine reuses one build.
//
// Plain Node ESM with no dependencies because it runs before the TypeScript build exists.
// Quiet on success except one stdout line with the binary path; exit code 1 with a message on failure.

import { existsSync, mkdirSync, mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { InstallError, describeFailure, isExecutable, runCaptured, runInstaller, toolsDir } from './install-common.mjs';

const RELEASE = '0.161.0';
const BUILDER_MODULE = 'go.opentelemetry.io/collector/cmd/builder';
const BINARY = 'otelcol-llm-extproc';

/** The builder's manifest: the distribution's name and version, and the only two components the tests use. */
function manifest(outputPath) {
  return [
    'dist:',
    `  name: ${BINARY}`,
    '  description: OpenTelemetry Collector for the llm-extproc tracing tests (OTLP in, JSON files out)',
    `  version: ${RELEASE}`,
    '  module: example.invalid/llm-extproc/otelcol',
    `  output_path: ${JSON.stringify(outputPath)}`,
    'receivers:',
    `  - gomod: go.opentelemetry.io/collector/receiver/otlpreceiver v${RELEASE}`,
    'exporters:',
    `  - gomod: github.com/open-telemetry/opentelemetry-collector-contrib/exporter/fileexporter v${RELEASE}`,
    '',
  ].join('\n');
}

/** True when the binary runs and reports the wanted release (the manifest's `dist.version`). */
function hasWantedVersion(bin) {
  const res = runCaptured(bin, ['--version']);
  if (res.error || res.status !== 0) return false;
  return `${res.stdout}`.includes(`version ${RELEASE}`);
}

function build(target) {
  const goCheck = runCaptured('go', ['version']);
  if (goCheck.error || goCheck.status !== 0) {
    throw new InstallError(
      `cannot build the OpenTelemetry Collector: \`go version\` failed (${describeFailure(goCheck)}). ` +
        'Install Go 1.26 or newer, or point OTELCOL_BIN at a collector with the OTLP receiver and the file exporter.',
    );
  }
  const dir = join(target, '..');
  mkdirSync(dir, { recursive: true });
  // Build into a private directory and rename, so a concurrent or interrupted run never leaves a
  // half-written binary at the cache path.
  const staging = mkdtempSync(join(dir, '.build-'));
  try {
    const env = { ...process.env, GOBIN: staging, CGO_ENABLED: '0', GOFLAGS: '-buildvcs=false' };
    const builderRef = `${BUILDER_MODULE}@v${RELEASE}`;
    const install = runCaptured('go', ['install', '-trimpath', builderRef], env);
    if (install.error || install.status !== 0) throw new InstallError(`\`go install ${builderRef}\` failed: ${describeFailure(install)}`);
    const source = join(staging, 'src');
    const manifestPath = join(staging, 'manifest.yaml');
    writeFileSync(manifestPath, manifest(source));
    const res = runCaptured(join(staging, 'builder'), ['--config', manifestPath], { ...env, GOBIN: '' });
    if (res.error || res.status !== 0) throw new InstallError(`the collector builder failed: ${describeFailure(res)}`);
    const built = join(source, BINARY);
    if (!existsSync(built)) throw new InstallError(`the collector builder reported success but left no ${BINARY} in ${source}`);
    renameSync(built, target);
  } finally {
    rmSync(staging, { recursive: true, force: true });
  }
}

function main() {
  const fromEnv = process.env.OTELCOL_BIN;
  if (fromEnv) {
    if (!isExecutable(fromEnv)) throw new InstallError(`OTELCOL_BIN=${fromEnv} is not an executable file`);
    return fromEnv;
  }
  const target = join(toolsDir(), `otelcol-v${RELEASE}`, BINARY);
  if (isExecutable(target) && hasWantedVersion(target)) return target;

  build(target);
  if (!hasWantedVersion(target)) {
    const res = runCaptured(target, ['--version']);
    throw new InstallError(`built ${target} but \`${BINARY} --version\` did not report ${RELEASE}: ${describeFailure(res)}`);
  }
  return target;
}

runInstaller('install-otelcol', main);
