// Keeps the README's demo command honest: the demo starts a real Envoy, llm-extproc as its own
// process and local model servers, answers sample requests, and shuts everything down. And it is
// quiet and fast as a newcomer meets it: the banner shows the ops URL, a normal start prints no
// line that looks like an error, a second start does not rebuild, and Ctrl-C ends it without an
// error object.

import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { mkdir, mkdtemp, readFile, rm, utimes, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { describe, it } from 'node:test';
import { promisify } from 'node:util';
import { repoRoot } from '../../scripts/repo-root.js';
import { waitUntil } from '../support/wait-until.js';

const run = promisify(execFile);
const DEMO = join(repoRoot(), 'dist', 'scripts', 'demo.js');
const BUILD_IF_STALE = join(repoRoot(), 'scripts', 'build-if-stale.mjs');

/** What a newcomer would read as something gone wrong: a warn/error/fatal log line, an error object, "error"/"fail" in a message. */
const ERROR_LOOKING = /"level":(40|50|60)|"err":|error|fail|ECONNRESET/i;

it('the demo serves sample requests end to end and exits cleanly', async () => {
  const stateDir = await mkdtemp(join(tmpdir(), 'llm-extproc-demo-'));
  let stdout: string;
  try {
    ({ stdout } = await run(process.execPath, [DEMO, '--smoke', '--port', '0', '--state-dir', stateDir], { timeout: 60_000 }));
  } finally {
    await rm(stateDir, { recursive: true, force: true });
  }
  assert.match(stdout, /model=llama-3-8b → 200/);
  assert.match(stdout, /model=qwen-2.5-7b → 200[\s\S]*data: \[DONE\]/);
  assert.match(stdout, /model=no-such-model → 404\n\{"error":\{[^\n]*"code":"model_not_found"/);
});

it('a normal start: the banner shows the ops URL, no line looks like an error; Ctrl-C exits 0 without an error object', async () => {
  const stateDir = await mkdtemp(join(tmpdir(), 'llm-extproc-demo-'));
  // Its own process group, as a shell runs a foreground job: Ctrl-C signals the whole group.
  const demo = spawn(process.execPath, [DEMO, '--port', '0', '--state-dir', stateDir], {
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  demo.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
  demo.stderr.on('data', (chunk: Buffer) => (out += chunk.toString()));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    demo.once('exit', (code, signal) => resolve({ code, signal })),
  );
  try {
    await waitUntil(() => (out.includes('Press Ctrl-C to stop.') ? true : undefined), {
      description: 'the demo banner',
      timeoutMs: 60_000,
    });
    const ops = /llm-extproc's ops port: (http:\/\/127\.0\.0\.1:\d+)\/metrics {2}\1\/healthz {2}\1\/readyz/.exec(out)?.[1];
    assert.ok(ops !== undefined, `the banner names the ops URL:\n${out}`);
    assert.equal((await fetch(`${ops}/healthz`)).status, 200);
    assert.match(await (await fetch(`${ops}/metrics`)).text(), /^llm_extproc_requests_total/m);
    assert.ok(out.includes(`curl -s ${ops}/metrics`), 'the ops URL sits with the curl examples');
    const startLines = out.slice(0, out.indexOf('llm-extproc demo is up')).split('\n');
    for (const line of startLines) assert.doesNotMatch(line, ERROR_LOOKING);

    const beforeStop = out.length;
    assert.ok(demo.pid !== undefined);
    process.kill(-demo.pid, 'SIGINT');
    assert.deepEqual(await exited, { code: 0, signal: null });
    const stopLines = out.slice(beforeStop);
    assert.match(stopLines, /"msg":"shutting down"/, 'llm-extproc stopped on its own terms');
    assert.doesNotMatch(stopLines, ERROR_LOOKING);
  } finally {
    if (demo.exitCode === null && demo.signalCode === null && demo.pid !== undefined) process.kill(-demo.pid, 'SIGKILL');
    await rm(stateDir, { recursive: true, force: true });
  }
});

describe('npm run demo builds only when dist/ is stale', () => {
  it('npm run demo uses the freshness check, and dist/ is up to date after the build', async () => {
    const scripts = (JSON.parse(await readFile(join(repoRoot(), 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts;
    assert.match(scripts.demo ?? '', /node scripts\/build-if-stale\.mjs && /);
    assert.doesNotMatch(scripts.demo ?? '', /npm run build/);
    const { stdout } = await run(process.execPath, [BUILD_IF_STALE, '--check']);
    assert.equal(stdout, 'dist/ is up to date\n', 'a second `npm run demo` would not run tsc');
  });

  it('no dist/, a source changed after its build, or a changed tsconfig.json: stale, naming why', async () => {
    const root = await mkdtemp(join(tmpdir(), 'llm-extproc-fresh-'));
    const at = (seconds: number) => new Date(1_700_000_000_000 + seconds * 1000);
    const file = async (path: string, seconds: number): Promise<void> => {
      await mkdir(dirname(join(root, path)), { recursive: true });
      await writeFile(join(root, path), '');
      await utimes(join(root, path), at(seconds), at(seconds));
    };
    const check = async (): Promise<string> => {
      try {
        const { stdout } = await run(process.execPath, [BUILD_IF_STALE, '--check', '--root', root]);
        return stdout;
      } catch (err) {
        return `exit ${String((err as { code?: number }).code)}: ${String((err as { stdout?: string }).stdout)}`;
      }
    };
    try {
      await file('tsconfig.json', 0);
      await file('package-lock.json', 0);
      await file('src/a.ts', 10);
      await file('test/b.ts', 10);
      await file('src/types/c.d.ts', 50);
      assert.equal(await check(), 'exit 1: dist/ is stale: src/a.ts has not been built\n');
      await file('dist/src/a.js', 20);
      await file('dist/test/b.js', 20);
      assert.equal(await check(), 'dist/ is up to date\n', 'declaration files have no output of their own');
      await file('test/b.ts', 30);
      assert.equal(await check(), 'exit 1: dist/ is stale: test/b.ts changed since it was built\n');
      await file('dist/test/b.js', 40);
      await file('tsconfig.json', 30);
      assert.equal(await check(), 'exit 1: dist/ is stale: tsconfig.json changed since the last build\n');
    } finally {
      await rm(root, { recursive: true, force: true });
    }
  });
});
