// Where the real control-plane binaries live. `scripts/install-kube.mjs` builds them (once, with
// the machine's Go; about 10 minutes on 2 cores) into the tools cache outside the clone and prints
// their paths; here we run it and read that line. On a machine that already has them it answers in
// well under a second.

import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { repoRoot } from '../../scripts/repo-root.js';

export interface KubeTools {
  readonly kubeApiserver: string;
  readonly etcd: string;
  /** The InferencePool CRD manifest (YAML) from the Gateway API Inference Extension module. */
  readonly inferencePoolCrd: string;
  /** The InferenceObjective CRD manifest (YAML) from the same module. */
  readonly inferenceObjectiveCrd: string;
  /** Envoy Gateway's gateway.envoyproxy.io CRDs (YAML stream) from its Go module. */
  readonly envoyGatewayCrds: string;
  /** The Prometheus operator's ServiceMonitor and PrometheusRule CRDs (YAML stream) from its Go module. */
  readonly prometheusOperatorCrds: string;
}

let pending: Promise<KubeTools> | undefined;

/** Builds the binaries on first use (progress on stderr), then resolves with their paths. */
export function kubeTools(): Promise<KubeTools> {
  pending ??= new Promise<KubeTools>((resolve, reject) => {
    const child = spawn(process.execPath, [join(repoRoot(), 'scripts', 'install-kube.mjs')], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.setEncoding('utf8');
    child.stdout.on('data', (chunk: string) => (out += chunk));
    child.once('error', reject);
    child.once('exit', (code) => {
      if (code !== 0) {
        reject(new Error(`scripts/install-kube.mjs exited ${code}`));
        return;
      }
      try {
        resolve(JSON.parse(out.trim().split('\n').at(-1) ?? '') as KubeTools);
      } catch (err) {
        reject(new Error(`scripts/install-kube.mjs printed no paths: ${out}`, { cause: err }));
      }
    });
  });
  return pending;
}
