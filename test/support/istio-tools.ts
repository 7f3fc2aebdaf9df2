// Where the live-Istio test bed's files are: istiod (pilot-discovery), Istio's `base` and `istiod`
// charts and the Gateway API CRDs of the same istio.io/istio commit. `scripts/install-istiod.mjs`
// builds and fetches them once into the tools cache outside the clone (npm test and .ci/run run it
// first; about 8 minutes on 2 cores the first time) and prints their paths; here we run it and
// read that line. On a machine that has them it answers in well under a second.

import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { repoRoot } from '../../scripts/repo-root.js';

export interface IstioTools {
  readonly pilotDiscovery: string;
  /** Istio's `base` chart directory (its CRDs). */
  readonly baseChart: string;
  /** Istio's `istiod` chart directory (istio-discovery). */
  readonly istiodChart: string;
  /** Gateway API standard-channel CRDs (YAML stream). */
  readonly gatewayApiCrds: string;
  /** What the binary reports (`pilot-discovery version --short`). */
  readonly istioVersion: string;
  readonly gatewayApiVersion: string;
}

let pending: Promise<IstioTools> | undefined;

export function istioTools(): Promise<IstioTools> {
  pending ??= promisify(execFile)(process.execPath, [join(repoRoot(), 'scripts', 'install-istiod.mjs')], {
    maxBuffer: 1 << 20,
  }).then(({ stdout }) => JSON.parse(stdout.trim().split('\n').at(-1) ?? '') as IstioTools);
  return pending;
}
