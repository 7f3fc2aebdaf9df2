// Reads the config file named on the command line (or by LLM_EXTPROC_CONFIG) and builds the
// configuration from it and the environment: the one place both the server and `--check-config`
// load it, so the check accepts exactly what the server would.

import { readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, resolve } from 'node:path';
import { buildConfig, ConfigError } from './config.js';
import type { Config } from './config.js';
import { errorMessage } from '../util/error-message.js';

type Env = Readonly<Record<string, string | undefined>>;

/** The config file's path: the flag, else LLM_EXTPROC_CONFIG; undefined = no file (defaults and environment). */
export function configPathFrom(flag: string | undefined, env: Env): string | undefined {
  const path = flag ?? env.LLM_EXTPROC_CONFIG;
  return path === undefined || path === '' ? undefined : path;
}

/**
 * Throws ConfigError with one operator-facing line (an unreadable file included). Relative paths
 * in the file are resolved against its folder (config.ts, PathBase).
 */
export function loadConfig(path: string | undefined, env: Env): Config {
  let text: string | undefined;
  if (path !== undefined) {
    try {
      text = readFileSync(path, 'utf8');
    } catch (err) {
      throw new ConfigError(`cannot read the config file: ${errorMessage(err)}`, { cause: err });
    }
  }
  const cwd = process.cwd();
  return buildConfig(text, env, { configDir: path === undefined ? undefined : dirname(resolve(cwd, path)), cwd, home: homedir() });
}
