// Process entry: the command line (cli.ts: --help, --version, --check-config), then read the config
// file (--config PATH or LLM_EXTPROC_CONFIG), start the app, and shut down gracefully on
// SIGTERM/SIGINT (in-flight streams get the configured grace period). Exit statuses: cli.ts.
// An error nothing caught ends the process (exit 1) after it is logged: the program's state is
// unknown from then on, and a proxy in an unknown state is worse than a restart. (A throwing
// stream processor is not such an error: the gRPC edge catches it and fails only that stream.)
// --workers N|auto (or LLM_EXTPROC_WORKERS) runs N node:cluster workers sharing the gRPC
// listener (see cluster.ts); the default, 1, is a single process.

import cluster from 'node:cluster';
import { existsSync, readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { pino } from 'pino';
import type { Logger } from 'pino';
import { startApp } from './app.js';
import { CheckFailed, checkConfig } from './check-config.js';
import { briefUsage, EXIT, parseCommandLine, usage, UsageError } from './cli.js';
import type { Command } from './cli.js';
import { attachWorker, runPrimary } from './cluster.js';
import { configPathFrom } from './config/load-config.js';
import { readGarbageCollector, startupDone } from './process-settings.js';
import { errorMessage } from './util/error-message.js';

function fail(message: string, code: number = EXIT.failure): never {
  process.stderr.write(`llm-extproc: ${message}\n`);
  process.exit(code);
}

function commandLine(): Command {
  try {
    return parseCommandLine(process.argv.slice(2));
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    process.stderr.write(`llm-extproc: ${err.message}\n${briefUsage()}`);
    process.exit(EXIT.usage);
  }
}

/**
 * The version in the nearest package.json above this module: dist/src/program.js → the package's,
 * and in the image, where this module is a chunk of the bundle (dist/bundle/chunks/), /app/package.json.
 */
function version(): string {
  for (let dir = new URL('./', import.meta.url); ; dir = new URL('../', dir)) {
    const file = new URL('package.json', dir);
    if (existsSync(file)) return (JSON.parse(readFileSync(file, 'utf8')) as { version: string }).version;
    if (dir.pathname === '/') throw new Error(`no package.json above ${import.meta.url}`);
  }
}

async function main(): Promise<void> {
  const command = commandLine();
  if (command.kind === 'help') {
    process.stdout.write(usage());
    return;
  }
  if (command.kind === 'version') {
    process.stdout.write(`llm-extproc ${version()} (node ${process.version})\n`);
    return;
  }
  const configPath = configPathFrom(command.configPath, process.env);
  const workersText = command.workers ?? process.env.LLM_EXTPROC_WORKERS;
  // One validation path: the server runs exactly the checks `--check-config` runs, so a config the
  // check passes is one the server starts with, and a bad one stops both with the same line.
  let report;
  try {
    report = await checkConfig(configPath, workersText, process.env, availableParallelism());
  } catch (err) {
    if (err instanceof CheckFailed) fail(err.message);
    throw err;
  }
  if (command.kind === 'check-config') {
    process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
    process.stderr.write(`llm-extproc: configuration is valid${configPath === undefined ? '' : ` (${configPath})`}\n`);
    return;
  }
  const { config, workers } = report;
  const workerIndex = cluster.isWorker ? process.env.LLM_EXTPROC_WORKER_INDEX : undefined;
  const logger = pino({
    level: config.logLevel,
    base: { service: 'llm-extproc', ...(workerIndex === undefined ? {} : { worker: Number(workerIndex) }) },
  });
  const exitOn = (what: string) => (err: unknown) => {
    // pino writes to stdout synchronously by default, so the line is out before we exit.
    logger.fatal({ err }, `${what}; exiting so that a clean process replaces this one`);
    process.exit(1);
  };
  process.on('uncaughtException', exitOn('uncaught exception'));
  process.on('unhandledRejection', exitOn('unhandled rejection'));

  let running: { stop(): Promise<void> };
  try {
    if (workers > 1 && cluster.isPrimary) {
      running = await runPrimary(config, workers, logger);
    } else {
      // Long bodies leave Buffers that die faster than the heap fills: scavenged before they set off a full
      // collection. Stream ends are also when the young generation's ceiling is looked at (process-settings.ts).
      const readGarbage = readGarbageCollector();
      const app = await startApp(config, logger, {
        opsServer: !cluster.isWorker,
        ...(readGarbage === undefined ? {} : { readGarbage }),
      });
      running = app;
      if (cluster.isWorker) attachWorker(app, () => shutdown(logger, running, 'primary'));
    }
  } catch (err) {
    // A port another process holds, an address this host lacks: the operator's to fix, in one line.
    if (isListenFailure(err)) fail(errorMessage(err));
    logger.fatal({ err }, 'failed to start');
    process.exit(1);
  }
  startupDone();
  process.once('SIGTERM', () => shutdown(logger, running, 'SIGTERM'));
  process.once('SIGINT', () => shutdown(logger, running, 'SIGINT'));
}

/** A listener that could not bind (`cannot listen on 127.0.0.1:9002: listen EADDRINUSE: …`, Node's error as its cause). */
function isListenFailure(err: unknown): boolean {
  const cause = err instanceof Error ? (err.cause as NodeJS.ErrnoException | undefined) : undefined;
  return cause?.syscall === 'listen' || cause?.syscall === 'bind';
}

function shutdown(logger: Logger, running: { stop(): Promise<void> }, signal: string): void {
  logger.info({ signal }, 'shutting down');
  running.stop().then(
    () => process.exit(0),
    (err: unknown) => {
      logger.error({ err }, 'shutdown failed');
      process.exit(1);
    },
  );
}

void main();
