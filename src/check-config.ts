// Everything the server checks at start before it opens a socket — the config file and the
// environment (listen addresses and ports, one endpoint source, paths made absolute), the worker
// count, the static endpoints file, the TLS pair — done without starting anything, and the
// effective settings (every default filled in) reported. `llm-extproc --check-config` prints the
// report; the server runs the same function first (main.ts), so the two cannot disagree.
// A Kubernetes source is not contacted: its pods are only known once the server lists them.
// Precise prefix matching's tokenizer is loaded (its files read, parsed and checked) the way the
// server loads it: FileTokenizer.shared keeps what it loaded, so the server does not load it twice.

import { readFile } from 'node:fs/promises';
import { parseWorkers } from './cluster.js';
import type { Config } from './config/config.js';
import { loadConfig } from './config/load-config.js';
import { parseStaticEndpoints } from './endpoints/static-file.js';
import { readUsableIdentity } from './grpc/tls-identity.js';
import { errorMessage } from './util/error-message.js';

type Env = Readonly<Record<string, string | undefined>>;

export interface PoolSummary {
  readonly name: string;
  readonly models: readonly string[];
  readonly endpoints: number;
  readonly ready: number;
}

/** What `--check-config` prints on stdout (JSON) when everything is usable. */
export interface ConfigReport {
  readonly configFile: string | null;
  readonly workers: number;
  /** The configuration the server would run with (milliseconds where the file says seconds). */
  readonly config: Config;
  readonly endpoints:
    | { readonly source: 'static'; readonly file: string; readonly pools: readonly PoolSummary[] }
    | { readonly source: 'kubernetes'; readonly contacted: false };
}

/** A check that failed; the message is one operator-facing line naming the file or field. */
export class CheckFailed extends Error {
  override readonly name = 'CheckFailed';
}

export async function checkConfig(
  configPath: string | undefined,
  workersText: string | undefined,
  env: Env,
  availableCpus: number,
): Promise<ConfigReport> {
  const config = attempt('invalid configuration', configPath, () => loadConfig(configPath, env));
  const workers = attempt('invalid configuration', configPath, () => parseWorkers(workersText, availableCpus));
  const tls = config.listen.tls;
  if (tls?.mode === 'files') {
    try {
      await readUsableIdentity(tls);
    } catch (err) {
      throw new CheckFailed(`listen.tls: ${errorMessage(err)}`, { cause: err });
    }
  }
  await checkTokenizer(config);
  let endpoints: ConfigReport['endpoints'];
  if (config.source.kind === 'static') {
    const file = config.source.path;
    let pools;
    try {
      pools = parseStaticEndpoints(await readFile(file, 'utf8'));
    } catch (err) {
      throw new CheckFailed(`endpoints file ${file}: ${errorMessage(err)}`, { cause: err });
    }
    endpoints = {
      source: 'static',
      file,
      pools: pools.map((p) => ({
        name: p.name,
        models: p.models,
        endpoints: p.endpoints.length,
        ready: p.endpoints.filter((e) => e.state === 'Ready').length,
      })),
    };
  } else {
    endpoints = { source: 'kubernetes', contacted: false };
  }
  return { configFile: configPath ?? null, workers, config, endpoints };
}

function attempt<T>(what: string, configPath: string | undefined, run: () => T): T {
  try {
    return run();
  } catch (err) {
    throw new CheckFailed(`${what}${configPath === undefined ? '' : ` (${configPath})`}: ${errorMessage(err)}`, { cause: err });
  }
}

/** Loads precise prefix matching's tokenizer when the config turns it on (its modules only then). */
async function checkTokenizer(config: Config): Promise<void> {
  const precise = config.picker.precise;
  if (precise === undefined || !(config.picker.weights.prefix > 0)) return;
  const { FileTokenizer, TokenizerFilesError } = await import('./kv-cache/file-tokenizer.js');
  try {
    await FileTokenizer.shared(precise.tokenizerDir);
  } catch (err) {
    if (err instanceof TokenizerFilesError) throw new CheckFailed(`picker.precise.tokenizerDir: ${err.message}`, { cause: err });
    throw err;
  }
}
