#!/usr/bin/env node
// Makes sure an h2spec v2.2.1 binary (the HTTP/2 conformance tester, 145 tests) is available for
// the conformance test and prints its path.
//
// Order: $H2SPEC_BIN (if set it must be executable; an explicit choice is never silently ignored),
// then the tools cache `${LLM_EXTPROC_TOOLS_DIR:-$HOME/.cache/llm-extproc}/h2spec-v2.2.1/h2spec`,
// then a fresh build of `github.com/summerwind/h2spec/cmd/h2spec` v2.2.1 from the Go module proxy
// (the only source CI may use; 1.5 min of CPU with a cold Go cache, 4 s warm). The cache lives
// outside the clone so every clone and CI run on the machine reuses one build.
//
// h2spec v2.2.1 predates Go modules (the proxy serves it as `v2.2.1+incompatible`, without a
// go.mod), so a plain `go install ...@v2.2.1+incompatible` resolves its dependencies to whatever is
// newest that day. We build it from a small wrapper module instead that pins every dependency to
// the versions the tool was checked with, so a build next year is the build of today.
//
// Plain Node ESM with no dependencies because it runs before the TypeScript build exists.
// Quiet on success except one stdout line with the binary path; exit code 1 with a message on failure.

import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { buildInStaging, pinnedBinary, requireGo, runCaptured, runChecked, runInstaller, toolsDir } from './install-common.mjs';

const H2SPEC_VERSION = 'v2.2.1';
const H2SPEC_PACKAGE = 'github.com/summerwind/h2spec/cmd/h2spec';
const WRAPPER_GO_MOD = `module llm-extproc.local/h2spec

go 1.21

require (
\tgithub.com/summerwind/h2spec ${H2SPEC_VERSION}+incompatible
\tgithub.com/fatih/color v1.19.0
\tgithub.com/mattn/go-colorable v0.1.14
\tgithub.com/mattn/go-isatty v0.0.20
\tgithub.com/spf13/cobra v1.10.2
\tgithub.com/spf13/pflag v1.0.9
\tgolang.org/x/net v0.62.0
\tgolang.org/x/sys v0.49.0
\tgolang.org/x/text v0.43.0
)
`;
// The tool prints `Version: <VERSION> (<COMMIT>)`; its own Makefile stamps both in.
const LDFLAGS = `-s -w -X main.VERSION=${H2SPEC_VERSION.slice(1)} -X main.COMMIT=llm-extproc-build`;

/** True when the binary runs and reports the wanted version (stamped in by LDFLAGS). */
function hasWantedVersion(bin) {
  const res = runCaptured(bin, ['--version']);
  if (res.error || res.status !== 0) return false;
  return `${res.stdout}`.includes(`Version: ${H2SPEC_VERSION.slice(1)} `);
}

function main() {
  return pinnedBinary({
    envVar: 'H2SPEC_BIN',
    target: join(toolsDir(), `h2spec-${H2SPEC_VERSION}`, 'h2spec'),
    version: H2SPEC_VERSION,
    reportsVersion: hasWantedVersion,
    build: (target) => {
      requireGo(`h2spec ${H2SPEC_VERSION} (or point H2SPEC_BIN at an h2spec v2 binary)`);
      buildInStaging(target, (staging) => {
        writeFileSync(join(staging, 'go.mod'), WRAPPER_GO_MOD);
        // -mod=mod (GO_ENV) writes go.sum from the module proxy's checksums (verified against sum.golang.org).
        runChecked('go', ['build', '-trimpath', `-ldflags=${LDFLAGS}`, '-o', 'h2spec', H2SPEC_PACKAGE], { cwd: staging });
        return join(staging, 'h2spec');
      });
    },
  });
}

runInstaller('install-h2spec', main);
