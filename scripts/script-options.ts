// Command-line options of the npm scripts (bench, simulate, demo…): node:util's parseArgs, plus
// `--help`, which prints the script's own header comment (where each script documents its flags),
// and a one-line message instead of a stack trace for an unknown or malformed flag.

import { existsSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import type { ParseArgsConfig } from 'node:util';
import { repoRoot } from './repo-root.js';

/** Exit status of a command-line usage error (as getopt-style tools use). */
const USAGE_EXIT = 2;

/**
 * parseArgs for the script at `scriptUrl` (its import.meta.url). `--help` or `-h` prints the
 * script's header comment and exits 0; a flag parseArgs refuses prints `<script>: <reason>` with a
 * pointer to `--help` and exits 2.
 */
export function parseScriptOptions<T extends ParseArgsConfig>(scriptUrl: string, config: T): ReturnType<typeof parseArgs<T>> {
  const name = scriptName(scriptUrl);
  const args = config.args ?? process.argv.slice(2);
  if (args.includes('--help') || args.includes('-h')) {
    process.stdout.write(usageText(scriptUrl, config));
    process.exit(0);
  }
  try {
    return parseArgs(config);
  } catch (err) {
    process.stderr.write(`${name}: ${err instanceof Error ? err.message : String(err)}\n${name}: --help lists the options\n`);
    process.exit(USAGE_EXIT);
  }
}

/** The script's path under dist/scripts without its extension (`bench`, `bench/upstream-process`). */
function scriptName(scriptUrl: string): string {
  const compiled = fileURLToPath(scriptUrl);
  return relative(join(repoRoot(), 'dist', 'scripts'), compiled).replace(/\.js$/, '');
}

/**
 * The header comment of the script's TypeScript source (the build drops comments), or, where the
 * source is not beside the build, the names of its flags.
 */
function usageText(scriptUrl: string, config: ParseArgsConfig): string {
  const source = join(repoRoot(), 'scripts', `${scriptName(scriptUrl)}.ts`);
  const header: string[] = [];
  if (existsSync(source)) {
    for (const line of readFileSync(source, 'utf8').split('\n')) {
      if (!line.startsWith('//')) break;
      header.push(line.replace(/^\/\/ ?/, ''));
    }
  }
  if (header.length > 0) return `${header.join('\n')}\n`;
  const flags = Object.entries(config.options ?? {}).map(([flag, option]) => `--${flag}${option.type === 'string' ? ' VALUE' : ''}`);
  return `${scriptName(scriptUrl)}: flags ${flags.join(' ')}\n`;
}
