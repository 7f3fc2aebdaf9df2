#!/usr/bin/env node
// Process entry: read the config file (--config PATH or LLM_EXTPROC_CONFIG), start the app,
// shut down gracefully on SIGTERM/SIGINT (in-flight streams get the configured grace period).
// An error nothing caught ends the process (exit 1) after it is logged: the program's state is
// unknown from then on, and a proxy in an unknown state is worse than a restart. (A throwing
// stream processor is not such an error: the gRPC edge catches it and fails only that stream.)

import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { pino } from 'pino';
import { startApp } from './app.js';
import { buildConfig } from './config/config.js';
import { errorMessage } from './util/error-message.js';

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
    const message = errorMessage(err);
    process.stderr.write(`llm-extproc: invalid configuration${configPath === undefined ? '' : ` (${configPath})`}: ${message}\n`);
    process.exit(2);
  }
  const logger = pino({ level: config.logLevel, base: { service: 'llm-extproc' } });
  const exitOn = (what: string) => (err: unknown) => {
    // pino writes to stdout synchronously by default, so the line is out before we exit.
    logger.fatal({ err }, `${what}; exiting so that a clean process replaces this one`);
    process.exit(1);
  };
  process.on('uncaughtException', exitOn('uncaught exception'));
  process.on('unhandledRejection', exitOn('unhandled rejection'));
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
