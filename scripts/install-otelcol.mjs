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

import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  buildInStaging,
  goInstallInto,
  pinnedBinary,
  requireGo,
  runCaptured,
  runChecked,
  runInstaller,
  toolsDir,
} from './install-common.mjs';

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

function main() {
  return pinnedBinary({
    envVar: 'OTELCOL_BIN',
    target: join(toolsDir(), `otelcol-v${RELEASE}`, BINARY),
    version: RELEASE,
    reportsVersion: hasWantedVersion,
    build: (target) => {
      requireGo('the OpenTelemetry Collector (or point OTELCOL_BIN at a collector with the OTLP receiver and the file exporter)');
      buildInStaging(target, (staging) => {
        const builder = goInstallInto(staging, `${BUILDER_MODULE}@v${RELEASE}`, '-s -w', { inherit: false });
        const source = join(staging, 'src');
        const manifestPath = join(staging, 'manifest.yaml');
        writeFileSync(manifestPath, manifest(source));
        runChecked(builder, ['--config', manifestPath], { cwd: staging, env: { GOBIN: '' } });
        return join(source, BINARY);
      });
    },
  });
}

runInstaller('install-otelcol', main);
