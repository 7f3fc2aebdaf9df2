#!/usr/bin/env node
// Process entry: read the config file (--config PATH or LLM_EXTPROC_CONFIG), start the app,
// shut down gracefully on SIGTERM/SIGINT (in-flight streams get the configured grace period).
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
import { buildConfig, ConfigError } from './config/config.js';

function readConfigText(path: string | undefined): string | undefined {
  if (path === undefined || path === '') return undefined;
  return readFileSync(path, 'utf8');
}

function fail(message: string): never {
  process.stderr.write(`llm-extproc: ${message}\n`);
  process.exit(2);
}

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { config: { type: 'string', short: 'c' }, workers: { type: 'string' } }, allowPositionals: false });
  const configPath = values.config ?? process.env.LLM_EXTPROC_CONFIG;
  let config;
  let workers;
  try {
    config = buildConfig(readConfigText(configPath), process.env);
  } catch (err) {
    const message = err instanceof ConfigError ? err.message : err instanceof Error ? err.message : String(err);
    fail(`invalid configuration${configPath === undefined ? '' : ` (${configPath})`}: ${message}`);
  }
  try {
    workers = parseWorkers(values.workers ?? process.env.LLM_EXTPROC_WORKERS, availableParallelism());
  } catch (err) {
    fail(err instanceof Error ? err.message : String(err));
  }
  const workerIndex = cluster.isWorker ? process.env.LLM_EXTPROC_WORKER_INDEX : undefined;
  const logger = pino({ level: config.logLevel, base: { service: 'llm-extproc', ...(workerIndex === undefined ? {} : { worker: Number(workerIndex) }) } });
  process.on('uncaughtException', (err) => logger.error({ err }, 'uncaught exception (kept running)'));
  process.on('unhandledRejection', (err) => logger.error({ err }, 'unhandled rejection (kept running)'));

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
