// The static endpoints file as a live source, against real files: load at start, reload on an
// atomic replace, keep the last good view on a bad edit. Every wait is on a callback, never a sleep.
import { afterEach, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rename, rm, unlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import type { EndpointSink, ObservedPool } from '../../../src/endpoints/model.js';
import { STATIC_SOURCE_NAME, StaticFileSource } from '../../../src/endpoints/static-source.js';
import type { StaticSourceObserver } from '../../../src/endpoints/static-source.js';
import { StaticFileError } from '../../../src/endpoints/static-file.js';

const silent = pino({ level: 'silent' });
/** Generous per-test limit: a watcher that never fires fails the test instead of hanging the run. */
const TIMEOUT = { timeout: 10_000 };

type Event =
  | { kind: 'replaceAll'; source: string; pools: readonly ObservedPool[] }
  | { kind: 'markSynced'; source: string }
  | { kind: 'loaded' }
  | { kind: 'reloadFailed'; error: Error };

/** A sink + observer that records every call and lets a test await the next call of a kind. */
class Recorder implements EndpointSink, StaticSourceObserver {
  readonly events: Event[] = [];
  private readonly waiters: Array<{ kind: Event['kind']; resolve: (event: Event) => void }> = [];

  replaceAll(source: string, pools: readonly ObservedPool[]): void {
    this.push({ kind: 'replaceAll', source, pools });
  }

  markSynced(source: string): void {
    this.push({ kind: 'markSynced', source });
  }

  loaded(): void {
    this.push({ kind: 'loaded' });
  }

  reloadFailed(error: Error): void {
    this.push({ kind: 'reloadFailed', error });
  }

  /** Resolves on the next call of `kind` made after this call. */
  next<K extends Event['kind']>(kind: K): Promise<Extract<Event, { kind: K }>> {
    return new Promise((resolve) => this.waiters.push({ kind, resolve: resolve as (event: Event) => void }));
  }

  kinds(): string[] {
    return this.events.map((e) => e.kind);
  }

  replaced(): Array<readonly ObservedPool[]> {
    return this.events.flatMap((e) => (e.kind === 'replaceAll' ? [e.pools] : []));
  }

  private push(event: Event): void {
    this.events.push(event);
    for (let i = this.waiters.length - 1; i >= 0; i--) {
      const waiter = this.waiters[i];
      if (waiter?.kind === event.kind) {
        this.waiters.splice(i, 1);
        waiter.resolve(event);
      }
    }
  }
}

function fileWith(models: string[], address = '10.0.0.1:8000'): string {
  return `pools:\n  - name: p\n    models: [${models.join(', ')}]\n    endpoints: ["${address}"]\n`;
}

function modelsOf(pools: readonly ObservedPool[]): string[] {
  return pools.flatMap((p) => [...p.models]);
}

let dir: string;
let path: string;
let sources: StaticFileSource[];

/** Replaces the file the way editors and ConfigMap updates do: write elsewhere, then rename over it. */
async function replaceAtomically(text: string): Promise<void> {
  const temp = join(dir, `.endpoints.yaml.${Math.random().toString(36).slice(2)}.tmp`);
  await writeFile(temp, text);
  await rename(temp, path);
}

async function started(recorder: Recorder): Promise<StaticFileSource> {
  const source = new StaticFileSource(path, silent, recorder);
  sources.push(source);
  await source.start(recorder);
  return source;
}

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'static-source-'));
  path = join(dir, 'endpoints.yaml');
  sources = [];
});

afterEach(async () => {
  for (const source of sources) source.stop();
  await rm(dir, { recursive: true, force: true });
});

describe('StaticFileSource', () => {
  it('start loads the file, then marks the source synced', TIMEOUT, async () => {
    await writeFile(path, fileWith(['llama']));
    const recorder = new Recorder();
    const source = await started(recorder);
    assert.equal(source.name, STATIC_SOURCE_NAME);
    assert.deepEqual(recorder.kinds(), ['replaceAll', 'loaded', 'markSynced']);
    assert.deepEqual(recorder.events[0], {
      kind: 'replaceAll',
      source: 'static',
      pools: [{ name: 'p', models: ['llama'], endpoints: [{ id: '10.0.0.1:8000', address: '10.0.0.1:8000', state: 'Ready', reason: '' }] }],
    });
    assert.deepEqual(recorder.events[2], { kind: 'markSynced', source: 'static' });
  });

  it('an atomic replace reloads the new view', TIMEOUT, async () => {
    await writeFile(path, fileWith(['llama']));
    const recorder = new Recorder();
    await started(recorder);
    const next = recorder.next('replaceAll');
    await replaceAtomically(fileWith(['llama', 'phi'], '10.0.0.2:8000'));
    const { pools } = await next;
    assert.deepEqual(modelsOf(pools), ['llama', 'phi']);
    assert.equal(pools[0]?.endpoints[0]?.address, '10.0.0.2:8000');
    assert.equal(recorder.kinds().filter((k) => k === 'markSynced').length, 1, 'synced once, at start');
  });

  it('an invalid edit keeps the last good view and reports reloadFailed; a later valid edit applies', TIMEOUT, async () => {
    await writeFile(path, fileWith(['llama']));
    const recorder = new Recorder();
    await started(recorder);

    const failed = recorder.next('reloadFailed');
    await replaceAtomically('pools:\n  - name: p\n    models: [llama]\n    endpoints: ["10.0.0.1"]\n');
    const { error } = await failed;
    assert.ok(error instanceof StaticFileError);
    assert.equal(error.message, 'pools[0].endpoints[0].address: expected "host:port", got "10.0.0.1"');
    assert.equal(recorder.replaced().length, 1, 'the bad file never reached the sink');

    const applied = recorder.next('replaceAll');
    await replaceAtomically(fileWith(['phi']));
    assert.deepEqual(modelsOf((await applied).pools), ['phi']);
    assert.equal(recorder.replaced().length, 2);
  });

  it('invalid YAML on reload is reported the same way', TIMEOUT, async () => {
    await writeFile(path, fileWith(['llama']));
    const recorder = new Recorder();
    await started(recorder);
    const failed = recorder.next('reloadFailed');
    await replaceAtomically('pools: [\n');
    assert.match((await failed).error.message, /^not valid YAML: /);
    assert.equal(recorder.replaced().length, 1);
  });

  it('a file briefly deleted and recreated is not reported as a failure', TIMEOUT, async () => {
    await writeFile(path, fileWith(['llama']));
    const recorder = new Recorder();
    await started(recorder);
    const applied = recorder.next('replaceAll');
    await unlink(path);
    await replaceAtomically(fileWith(['phi']));
    assert.deepEqual(modelsOf((await applied).pools), ['phi']);
    assert.equal(recorder.kinds().includes('reloadFailed'), false);
  });

  it('a missing file at start rejects with an error naming the file', TIMEOUT, async () => {
    const recorder = new Recorder();
    const source = new StaticFileSource(path, silent, recorder);
    await assert.rejects(source.start(recorder), (err: Error) => {
      assert.equal((err.cause as NodeJS.ErrnoException).code, 'ENOENT');
      assert.ok(err.message.includes(path), err.message);
      return true;
    });
    assert.deepEqual(recorder.kinds(), [], 'nothing reached the sink, and the source is not synced');
  });

  it('an invalid file at start rejects with the precise problem', TIMEOUT, async () => {
    await writeFile(path, 'pools:\n  - { name: p, models: [] }\n');
    const recorder = new Recorder();
    const source = new StaticFileSource(path, silent, recorder);
    await assert.rejects(source.start(recorder), (err: unknown) => {
      assert.ok(err instanceof StaticFileError);
      assert.match(err.message, /pools\[0\]\.models: expected a non-empty list of model names/);
      return true;
    });
    assert.deepEqual(recorder.kinds(), []);
  });

  it('an invalid file at start names the file in the error', TIMEOUT, async () => {
    await writeFile(path, 'pools:\n  - { name: p, models: [] }\n');
    const recorder = new Recorder();
    const source = new StaticFileSource(path, silent, recorder);
    await assert.rejects(source.start(recorder), (err: Error) => err.message.includes(path));
  });

  it('after stop() a change reaches nobody', TIMEOUT, async () => {
    await writeFile(path, fileWith(['llama']));
    const stoppedRecorder = new Recorder();
    const stopped = await started(stoppedRecorder);
    // A second source on the same directory proves the change was observable at all.
    const control = new Recorder();
    await started(control);
    stopped.stop();
    const seenByControl = control.next('replaceAll');
    await replaceAtomically(fileWith(['phi']));
    assert.deepEqual(modelsOf((await seenByControl).pools), ['phi']);
    // Give a reload that had (wrongly) started the same time to finish reading the file.
    await readFile(path, 'utf8');
    await new Promise((resolve) => setImmediate(resolve));
    assert.deepEqual(stoppedRecorder.kinds(), ['replaceAll', 'loaded', 'markSynced'], 'only the calls made at start');
  });

  it('stop() is safe to call twice and before start', TIMEOUT, async () => {
    await writeFile(path, fileWith(['llama']));
    const neverStarted = new StaticFileSource(path, silent, new Recorder());
    assert.doesNotThrow(() => neverStarted.stop(), 'stop before start has no watcher to close');
    const recorder = new Recorder();
    const source = await started(recorder);
    const control = new Recorder();
    await started(control);
    assert.doesNotThrow(() => {
      source.stop();
      source.stop();
    });
    const seenByControl = control.next('replaceAll');
    await replaceAtomically(fileWith(['phi']));
    assert.deepEqual(modelsOf((await seenByControl).pools), ['phi']);
    await new Promise((resolve) => setImmediate(resolve));
    assert.deepEqual(recorder.kinds(), ['replaceAll', 'loaded', 'markSynced'], 'stopped twice, it stays stopped');
  });
});
