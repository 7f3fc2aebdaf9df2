// The static endpoints file as a source: loads it at start (a bad file at start is fatal, with a
// clear message), then reloads when it changes. A bad edit later is logged and counted, and the
// last good view stays in force.

import { watch, type FSWatcher } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { basename, dirname } from 'node:path';
import type { Logger } from 'pino';
import type { EndpointSink, EndpointSource } from './model.js';
import { parseStaticEndpoints, StaticFileError } from './static-file.js';
import { errorMessage } from '../util/error-message.js';

export interface StaticSourceObserver {
  loaded(): void;
  reloadFailed(error: Error): void;
}

export const STATIC_SOURCE_NAME = 'static';

export class StaticFileSource implements EndpointSource {
  readonly name = STATIC_SOURCE_NAME;
  private watcher: FSWatcher | undefined;
  private lastText: string | undefined;
  private reloading: Promise<void> = Promise.resolve();
  private stopped = false;

  constructor(
    private readonly path: string,
    private readonly logger: Logger,
    private readonly observer: StaticSourceObserver,
  ) {}

  async start(sink: EndpointSink): Promise<void> {
    let pools;
    let text: string;
    try {
      text = await readFile(this.path, 'utf8');
      pools = parseStaticEndpoints(text);
    } catch (err) {
      throw new StaticFileError(`endpoints file ${this.path}: ${errorMessage(err)}`, { cause: err });
    }
    sink.replaceAll(this.name, pools);
    this.lastText = text;
    this.observer.loaded();
    sink.markSynced(this.name);
    // Watch the directory, not the file: editors and Kubernetes ConfigMaps replace files by rename.
    const file = basename(this.path);
    this.watcher = watch(dirname(this.path), { persistent: false }, (_event, changed) => {
      if (changed === null || changed === file || changed.startsWith('..')) this.scheduleReload(sink);
    });
    this.watcher.on('error', (err) => this.logger.error({ err, path: this.path }, 'endpoints file watch failed'));
  }

  stop(): void {
    this.stopped = true;
    this.watcher?.close();
  }

  /** Reloads run one after another so a burst of events cannot apply an older read last. */
  private scheduleReload(sink: EndpointSink): void {
    this.reloading = this.reloading.then(() => this.reload(sink));
  }

  private async reload(sink: EndpointSink): Promise<void> {
    if (this.stopped) return;
    let text: string;
    try {
      text = await readFile(this.path, 'utf8');
    } catch (err) {
      // Mid-rename the file can be briefly absent; the next event brings the new one.
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return;
      this.failed(err);
      return;
    }
    if (text === this.lastText || this.stopped) return;
    try {
      const pools = parseStaticEndpoints(text);
      this.lastText = text;
      sink.replaceAll(this.name, pools);
      this.observer.loaded();
      this.logger.info({ path: this.path, pools: pools.length }, 'endpoints file reloaded');
    } catch (err) {
      this.lastText = text;
      this.failed(err);
    }
  }

  private failed(err: unknown): void {
    const error = err instanceof Error ? err : new Error(String(err));
    this.observer.reloadFailed(error);
    this.logger.error({ err: error, path: this.path }, 'endpoints file reload failed; keeping the last good view');
  }
}
