// The command line, as pure functions: argv → what to do, and the usage text. main.ts does the I/O.
// Every flag is declared once (FLAGS), and both the parser and `--help` read that table, so the
// help cannot leave a flag out. Exit statuses: 0 done, 1 invalid configuration or a failure,
// 2 a command line we cannot run (then one line saying why, and the usage).

import { parseArgs } from 'node:util';
import { parseWorkers } from './cluster.js';
import { ENVIRONMENT_OVERRIDES } from './config/config.js';
import { TRACING_ENVIRONMENT } from './config/tracing-config.js';
import { errorMessage } from './util/error-message.js';

/** What main.ts should do. */
export type Command =
  | { readonly kind: 'help' }
  | { readonly kind: 'version' }
  | { readonly kind: 'run' | 'check-config'; readonly configPath?: string; readonly workers?: string };

/** A command line we cannot run; its message is one line (main.ts adds the usage). */
export class UsageError extends Error {
  override readonly name = 'UsageError';
}

export const EXIT = { ok: 0, failure: 1, usage: 2 } as const;

interface Flag {
  readonly name: string;
  readonly short?: string;
  /** Placeholder of the value; absent = a switch. */
  readonly value?: string;
  readonly env?: string;
  readonly help: string;
}

const FLAGS: readonly Flag[] = [
  {
    name: 'config',
    short: 'c',
    value: 'PATH',
    env: 'LLM_EXTPROC_CONFIG',
    help: 'YAML config file; every key is optional (without one: the defaults and the environment).',
  },
  {
    name: 'workers',
    value: 'N|auto',
    env: 'LLM_EXTPROC_WORKERS',
    help: 'node:cluster workers sharing the gRPC listener; auto = one per CPU (default 1).',
  },
  {
    name: 'check-config',
    help: 'Load and validate the config, the endpoints file and the TLS files, print the effective config (every default filled in) as JSON on stdout, and exit: 0 valid, 1 invalid. Starts nothing.',
  },
  { name: 'help', short: 'h', help: 'Print this help and exit 0.' },
  { name: 'version', short: 'V', help: 'Print the version and exit 0.' },
];

const PARSER_OPTIONS = Object.fromEntries(
  FLAGS.map((flag) => [
    flag.name,
    { type: flag.value === undefined ? 'boolean' : 'string', ...(flag.short === undefined ? {} : { short: flag.short }) },
  ]),
) as Record<string, { type: 'boolean' | 'string'; short?: string }>;

/** argv without node and the script (process.argv.slice(2)). Throws UsageError. */
export function parseCommandLine(argv: readonly string[]): Command {
  // Non-strict parsing gives tokens for everything, so each mistake gets its own one-line message
  // (node's strict errors are long and talk about positionals).
  const { tokens } = parseArgs({ args: [...argv], options: PARSER_OPTIONS, strict: false, allowPositionals: true, tokens: true });
  const values = new Map<string, string | true>();
  for (const token of tokens) {
    if (token.kind === 'option-terminator') continue;
    if (token.kind === 'positional') throw new UsageError(`unexpected argument ${JSON.stringify(token.value)}`);
    const flag = FLAGS.find((f) => f.name === token.name);
    if (flag === undefined) throw new UsageError(`unknown option ${token.rawName}`);
    const shown = `--${flag.name}`;
    if (flag.value === undefined) {
      if (token.value !== undefined) throw new UsageError(`${shown} takes no value`);
      values.set(flag.name, true);
      continue;
    }
    // `--config --workers 2` would otherwise read "--workers" as the path.
    if (token.value === undefined || token.value === '' || (!token.inlineValue && token.value.startsWith('-')))
      throw new UsageError(`${shown} needs a value (${shown} ${flag.value})`);
    if (values.has(flag.name)) throw new UsageError(`${shown} given twice`);
    if (flag.name === 'workers') checkWorkers(token.value);
    values.set(flag.name, token.value);
  }
  if (values.has('help')) return { kind: 'help' };
  if (values.has('version')) return { kind: 'version' };
  const configPath = values.get('config');
  const workers = values.get('workers');
  return {
    kind: values.has('check-config') ? 'check-config' : 'run',
    ...(typeof configPath === 'string' ? { configPath } : {}),
    ...(typeof workers === 'string' ? { workers } : {}),
  };
}

/** A malformed --workers is a command-line mistake (exit 2); `auto` is resolved later, against the CPUs. */
function checkWorkers(text: string): void {
  try {
    parseWorkers(text, 1);
  } catch (err) {
    throw new UsageError(`--${errorMessage(err)}`);
  }
}

const SYNOPSIS = [
  'Usage: llm-extproc [--config PATH] [--workers N|auto]',
  '       llm-extproc --check-config [--config PATH] [--workers N|auto]',
  '       llm-extproc --help | --version',
];

/** What follows the one-line error of a command line that cannot be run. */
export function briefUsage(): string {
  return [...SYNOPSIS, "Run 'llm-extproc --help' for every option and environment variable.", ''].join('\n');
}

/** `--help`'s text: every flag, every environment variable, the exit statuses. */
export function usage(): string {
  const flagLines = FLAGS.map((flag) => {
    const names = `${flag.short === undefined ? '    ' : `-${flag.short}, `}--${flag.name}${flag.value === undefined ? '' : ` ${flag.value}`}`;
    return row(names, `${flag.help}${flag.env === undefined ? '' : ` Env: ${flag.env}.`}`);
  });
  const envLines = ENVIRONMENT_OVERRIDES.map((o) => row(o.name, o.help));
  const tracingLines = TRACING_ENVIRONMENT.map((o) => row(o.name, o.help));
  return [
    ...SYNOPSIS,
    '',
    'Envoy external-processing (ext_proc) server that routes OpenAI-compatible requests to ready',
    'model-server replicas and answers every failure with structured JSON.',
    '',
    'Options:',
    ...flagLines,
    '',
    'Environment overrides (they win over the config file):',
    ...envLines,
    '',
    'OpenTelemetry variables (tracing; they win over the tracing section of the config file):',
    ...tracingLines,
    '',
    'Exit status: 0 success (a clean shutdown after SIGTERM/SIGINT, a valid --check-config),',
    '1 invalid configuration or a failure, 2 a command line that cannot be run.',
    '',
  ].join('\n');
}

function row(left: string, right: string): string {
  const width = 30;
  const lines = wrap(right, 100 - width);
  const first = left.length < width - 2 ? `  ${left.padEnd(width - 2)}${lines[0]}` : `  ${left}\n${' '.repeat(width)}${lines[0]}`;
  return [first, ...lines.slice(1).map((line) => `${' '.repeat(width)}${line}`)].join('\n');
}

function wrap(text: string, width: number): string[] {
  const lines: string[] = [];
  let line = '';
  for (const word of text.split(' ')) {
    if (line !== '' && line.length + 1 + word.length > width) {
      lines.push(line);
      line = word;
    } else line = line === '' ? word : `${line} ${word}`;
  }
  lines.push(line);
  return lines;
}
