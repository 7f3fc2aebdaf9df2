#!/usr/bin/env node
// Process entry: read the config file (--config PATH or LLM_EXTPROC_CONFIG), start the app,
// shut down gracefully on SIGTERM/SIGINT (in-flight streams get the configured grace period).
// An error nothing caught ends the process (exit 1) after it is logged: the program's state is
// unknown from then on, and a proxy in an unknown state is worse than a restart. (A throwing
// stream processor is not such an error: the gRPC edge catches it and fails only that stream.)
// --workers N|auto (or LLM_EXTPROC_WORKERS) runs N node:cluster workers sharing the gRPC
// listener (see cluster.ts); the default, 1, is a single process.

import cluster from 'node:cluster';
import { readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { parseArgs } from 'node:util';
import { pino } from 'pino';
import type { Logger } from 'pino';
import { startApp } from './app.js';
import { attachWorker, parseWorkers, runPrimary } from './cluster.js';
import { buildConfig } from './config/config.js';
import { errorMessage } from './util/error-message.js';

function readConfigText(path: string | undefined): string | undefined {
  if (path === undefined || path === '') return undefined;
  return readFileSync(path, 'utf8');
}

function fail(message: string): never {
  process.stderr.write(`llm-extproc: ${message}\n`);
  process.exit(2);
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: { config: { type: 'string', short: 'c' }, workers: { type: 'string' } },
    allowPositionals: false,
  });
  const configPath = values.config ?? process.env.LLM_EXTPROC_CONFIG;
  let config;
  let workers;
  try {
    config = buildConfig(readConfigText(configPath), process.env);
  } catch (err) {
    const message = errorMessage(err);
    fail(`invalid configuration${configPath === undefined ? '' : ` (${configPath})`}: ${message}`);
  }
  try {
    workers = parseWorkers(values.workers ?? process.env.LLM_EXTPROC_WORKERS, availableParallelism());
  } catch (err) {
    fail(errorMessage(err));
  }
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
      const app = await startApp(config, logger, { opsServer: !cluster.isWorker });
      running = app;
      if (cluster.isWorker) attachWorker(app, () => shutdown(logger, running, 'primary'));
    }
  } catch (err) {
    logger.fatal({ err }, 'failed to start');
    process.exit(1);
  }
  process.once('SIGTERM', () => shutdown(logger, running, 'SIGTERM'));
  process.once('SIGINT', () => shutdown(logger, running, 'SIGINT'));
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
