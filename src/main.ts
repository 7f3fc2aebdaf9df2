#!/usr/bin/env node
// Process entry: read the config file (--config PATH or LLM_EXTPROC_CONFIG), start the app,
// shut down gracefully on SIGTERM/SIGINT (in-flight streams get the configured grace period).

import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { pino } from 'pino';
import { startApp } from './app.js';
import { buildConfig, ConfigError } from './config/config.js';

function readConfigText(path: string | undefined): string | undefined {
  if (path === undefined || path === '') return undefined;
  return readFileSync(path, 'utf8');
}

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { config: { type: 'string', short: 'c' } }, allowPositionals: false });
  const configPath = values.config ?? process.env.LLM_EXTPROC_CONFIG;
  let config;
  try {
    config = buildConfig(readConfigText(configPath), process.env);
  } catch (err) {
    const message = err instanceof ConfigError ? err.message : err instanceof Error ? err.message : String(err);
    process.stderr.write(`llm-extproc: invalid configuration${configPath === undefined ? '' : ` (${configPath})`}: ${message}\n`);
    process.exit(2);
  }
  const logger = pino({ level: config.logLevel, base: { service: 'llm-extproc' } });
  process.on('uncaughtException', (err) => logger.error({ err }, 'uncaught exception (kept running)'));
  process.on('unhandledRejection', (err) => logger.error({ err }, 'unhandled rejection (kept running)'));
  let app;
  try {
    app = await startApp(config, logger);
  } catch (err) {
    logger.fatal({ err }, 'failed to start');
    process.exit(1);
  }
  const running = app;
  const shutdown = (signal: string): void => {
    logger.info({ signal }, 'shutting down');
    running.stop().then(
      () => process.exit(0),
      (err: unknown) => {
        logger.error({ err }, 'shutdown failed');
        process.exit(1);
      },
    );
  };
  process.once('SIGTERM', () => shutdown('SIGTERM'));
  process.once('SIGINT', () => shutdown('SIGINT'));
}

void main();
