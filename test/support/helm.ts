// Runs the Helm binary for the chart tests. `scripts/install-helm.mjs` builds it into the tools
// cache (npm test runs it first); HELM_BIN overrides. This module only locates and runs it, so
// the test run never builds or downloads anything by surprise.

import { execFile } from 'node:child_process';
import { accessSync, constants } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { parseAllDocuments } from 'yaml';

export const HELM_VERSION = 'v3.22.0';

export function helmBinaryPath(): string {
  const fromEnv = process.env['HELM_BIN'];
  const tools = process.env['LLM_EXTPROC_TOOLS_DIR'] || join(homedir(), '.cache', 'llm-extproc');
  const path = fromEnv || join(tools, `helm-${HELM_VERSION}`, 'helm');
  try {
    accessSync(path, constants.X_OK);
  } catch {
    throw new Error(`no helm at ${path}: run \`node scripts/install-helm.mjs\` (npm test does) or set HELM_BIN`);
  }
  return path;
}

export interface RunResult {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs a command to completion; a non-zero exit is a result, not an exception. */
export function run(cmd: string, args: readonly string[], options: { env?: NodeJS.ProcessEnv } = {}): Promise<RunResult> {
  return new Promise((resolve, reject) => {
    execFile(cmd, args, { maxBuffer: 64 * 1024 * 1024, env: options.env ?? process.env }, (err, stdout, stderr) => {
      if (err !== null && typeof err.code !== 'number') {
        reject(new Error(`cannot run ${cmd}: ${err.message}`));
        return;
      }
      resolve({ code: err === null ? 0 : Number(err.code), stdout, stderr });
    });
  });
}

/** Helm with a private home, so the tests neither read nor write the user's Helm settings. */
export function helm(args: readonly string[], home: string): Promise<RunResult> {
  const env = {
    ...process.env,
    HELM_CACHE_HOME: join(home, 'cache'),
    HELM_CONFIG_HOME: join(home, 'config'),
    HELM_DATA_HOME: join(home, 'data'),
  };
  return run(helmBinaryPath(), args, { env });
}

/** A Kubernetes object as rendered (only the fields every object has are typed). */
export interface K8sObject {
  readonly apiVersion: string;
  readonly kind: string;
  readonly metadata: {
    readonly name: string;
    readonly namespace?: string;
    readonly labels?: Record<string, string>;
    readonly annotations?: Record<string, string>;
  };
  readonly [field: string]: unknown;
}

/** Parses `helm template` output into objects (empty documents dropped); throws on invalid YAML. */
export function parseManifests(text: string): K8sObject[] {
  const objects: K8sObject[] = [];
  for (const doc of parseAllDocuments(text)) {
    if (doc.errors.length > 0) throw new Error(`rendered YAML is invalid: ${doc.errors.map((e) => e.message).join('; ')}`);
    const value: unknown = doc.toJS();
    if (value === null || value === undefined) continue;
    objects.push(value as K8sObject);
  }
  return objects;
}
