// The container image without a Docker engine: the Dockerfile's runtime stage is read, its steps are
// performed outside Docker (a production-only `npm ci` of the lockfile, then only the files the
// stage copies), and the server is started from that tree as an unprivileged user with the app
// directory read-only. It must reach /readyz 200 on a static endpoints file — what the kubelet's
// readiness probe asks of the real image.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { chmodSync, cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { repoRoot } from '../../scripts/repo-root.js';
import { waitUntil } from '../support/wait-until.js';

interface Stage {
  readonly from: string;
  readonly name: string | undefined;
  readonly instructions: ReadonlyArray<{ readonly op: string; readonly args: string }>;
}

/** The Dockerfile's stages, each with its instructions (comments and line continuations handled). */
function parseDockerfile(text: string): Stage[] {
  const lines = text
    .replace(/\\\n/g, ' ')
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '' && !l.startsWith('#'));
  const stages: Array<{ from: string; name: string | undefined; instructions: Array<{ op: string; args: string }> }> = [];
  for (const line of lines) {
    const [op = '', ...rest] = line.split(/\s+/);
    const args = rest.join(' ');
    if (op.toUpperCase() === 'FROM') {
      const m = /^(\S+)(?:\s+AS\s+(\S+))?$/i.exec(args);
      stages.push({ from: m?.[1] ?? args, name: m?.[2], instructions: [] });
    } else stages.at(-1)?.instructions.push({ op: op.toUpperCase(), args });
  }
  return stages;
}

const ROOT = repoRoot();
const dockerfile = parseDockerfile(readFileSync(join(ROOT, 'Dockerfile'), 'utf8'));
const runtime = dockerfile.at(-1) as Stage;

function httpGet(port: number, path: string): Promise<number> {
  return new Promise((resolve) => {
    const req = request({ host: '127.0.0.1', port, path, timeout: 2000 }, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.on('error', () => resolve(0));
    req.on('timeout', () => req.destroy());
    req.end();
  });
}

/** uid/gid of `nobody` when we may switch to it (running as root), else undefined. */
function unprivilegedUser(): { uid: number; gid: number } | undefined {
  if (process.getuid?.() !== 0) return undefined;
  const uid = spawnSync('id', ['-u', 'nobody'], { encoding: 'utf8' });
  const gid = spawnSync('id', ['-g', 'nobody'], { encoding: 'utf8' });
  if (uid.status !== 0 || gid.status !== 0) return undefined;
  return { uid: Number(uid.stdout.trim()), gid: Number(gid.stdout.trim()) };
}

describe('container image (runtime stage emulated outside Docker)', () => {
  let work = '';
  let server: ChildProcess | undefined;
  let logs = '';

  before(() => {
    work = mkdtempSync(join(tmpdir(), 'image-test-'));
    chmodSync(work, 0o755);
  });
  after(() => {
    server?.kill('SIGKILL');
    spawnSync('chmod', ['-R', 'u+w', work]);
    rmSync(work, { recursive: true, force: true });
  });

  it('is multi-stage, installs production dependencies only and runs as a non-root user', () => {
    assert.ok(dockerfile.length >= 2, 'a build stage and a runtime stage');
    assert.ok(runtime.name === undefined, 'the last stage is the runtime image');
    const runs = runtime.instructions.filter((i) => i.op === 'RUN').map((i) => i.args);
    assert.ok(
      runs.some((r) => /npm ci\b.*--omit=dev/.test(r)),
      'npm ci --omit=dev in the runtime stage',
    );
    assert.ok(!runs.some((r) => /\b(tsc|npm run build|npm install)\b/.test(r)), 'no build in the runtime stage');
    const user = runtime.instructions.filter((i) => i.op === 'USER').at(-1)?.args;
    assert.ok(user !== undefined && user !== 'root' && user !== '0', `USER ${String(user)} is not root`);
  });

  it('the runtime tree starts as an unprivileged user with a read-only app directory and reaches /readyz 200', async () => {
    const app = join(work, 'app');
    mkdirSync(app);
    // The runtime stage's steps, in order: COPY from the context or the build stage, RUN npm ci.
    for (const { op, args } of runtime.instructions) {
      if (op === 'COPY') {
        const parts = args.split(/\s+/);
        const fromBuild = parts[0]?.startsWith('--from=') === true;
        const paths = parts.filter((p) => !p.startsWith('--'));
        const dest = paths.pop() as string;
        for (const src of paths) {
          // `COPY --from=build /app/dist/src` is the build stage's tsc output: our own dist/src.
          const source = fromBuild ? join(ROOT, src.replace(/^\/app\//, '')) : join(ROOT, src);
          assert.ok(existsSync(source), `${source} exists (npm test builds dist/ first)`);
          // A destination ending in `/` is a directory the sources go into; otherwise it is the new name.
          const target = dest.endsWith('/') ? join(app, dest, basename(src)) : join(app, dest);
          cpSync(source, target, { recursive: true });
        }
      } else if (op === 'RUN') {
        // `npm cache clean` only shrinks the image; a private cache keeps the user's untouched.
        const install = /npm ci[^&]*/.exec(args)?.[0];
        assert.ok(install !== undefined, `unexpected RUN in the runtime stage: ${args}`);
        const res = spawnSync('npm', [...install.trim().split(/\s+/).slice(1), '--cache', join(work, 'npm-cache'), '--prefer-offline'], {
          cwd: app,
          encoding: 'utf8',
          env: { ...process.env, NODE_ENV: 'production' },
        });
        assert.equal(res.status, 0, `npm ci --omit=dev failed:\n${res.stderr}`);
      }
    }
    // Production dependencies only, and nothing but what the stage copies.
    const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { dependencies: Record<string, string> };
    for (const dep of Object.keys(pkg.dependencies)) assert.ok(existsSync(join(app, 'node_modules', dep)), `${dep} installed`);
    // The lockfile marks packages needed only for development (typescript, eslint, …) `dev: true`.
    const lock = JSON.parse(readFileSync(join(ROOT, 'package-lock.json'), 'utf8')) as { packages: Record<string, { dev?: boolean }> };
    const devOnly = Object.entries(lock.packages).filter(([path, p]) => p.dev === true && path.startsWith('node_modules/'));
    assert.ok(
      devOnly.some(([path]) => path === 'node_modules/typescript'),
      'the lockfile marks typescript dev-only',
    );
    for (const [path] of devOnly) assert.ok(!existsSync(join(app, path)), `dev-only ${path} not installed`);
    assert.ok(
      !existsSync(join(app, 'src')) && !existsSync(join(app, 'test')) && !existsSync(join(app, 'dist', 'test')),
      'no sources or tests in the image',
    );
    // Build-time code (tools/: the Envoy config renderer, the gateway profiles, the error-docs
    // generator) and the .proto files (the tests' codec oracle) stay out of the runtime tree.
    assert.ok(!existsSync(join(app, 'dist', 'tools')) && !existsSync(join(app, 'proto')), 'no build-time code or protos in the image');
    for (const buildTime of ['envoy-config', join('errors', 'docs.js')]) {
      assert.ok(!existsSync(join(app, 'dist', 'src', buildTime)), `dist/src/${buildTime} is build-time code`);
    }

    // Config and endpoints come from a mounted ConfigMap in Kubernetes: a separate read-only dir.
    const etc = join(work, 'etc');
    mkdirSync(etc, { mode: 0o755 });
    writeFileSync(join(etc, 'endpoints.yaml'), 'pools:\n  - name: llama\n    models: [llama-3-8b]\n    endpoints: ["127.0.0.1:9"]\n', {
      mode: 0o644,
    });
    writeFileSync(
      join(etc, 'config.yaml'),
      `listen:\n  grpc: 127.0.0.1:0\n  http: 127.0.0.1:0\nstatic:\n  path: ${join(etc, 'endpoints.yaml')}\n`,
      { mode: 0o644 },
    );
    spawnSync('chmod', ['-R', 'a-w', app, etc]);

    const entry = runtime.instructions.find((i) => i.op === 'ENTRYPOINT')?.args;
    assert.equal(entry, '["node", "dist/src/main.js"]');
    const user = unprivilegedUser();
    server = spawn(process.execPath, ['dist/src/main.js', '--config', join(etc, 'config.yaml')], {
      cwd: app,
      env: { PATH: process.env.PATH ?? '', NODE_ENV: 'production', HOME: '/nonexistent' },
      stdio: ['ignore', 'pipe', 'pipe'],
      ...(user === undefined ? {} : user),
    });
    server.stdout?.on('data', (chunk: Buffer) => (logs += chunk.toString()));
    server.stderr?.on('data', (chunk: Buffer) => (logs += chunk.toString()));
    const exited = new Promise<number | null>((resolve) => server?.once('exit', resolve));

    const started = await waitUntil(
      () => {
        const m = /"http":(\d+).*"llm-extproc started"/.exec(logs);
        if (m) return Number(m[1]);
        return server?.exitCode === null ? undefined : 0;
      },
      { description: 'the server logs its HTTP port', timeoutMs: 30_000 },
    );
    assert.ok(started > 0, `server did not start:\n${logs}`);
    const status = await waitUntil(async () => ((await httpGet(started, '/readyz')) === 200 ? 200 : undefined), {
      description: '/readyz 200',
      timeoutMs: 30_000,
    });
    assert.equal(status, 200);
    if (user !== undefined) {
      const owner = spawnSync('ps', ['-o', 'uid=', '-p', String(server.pid)], { encoding: 'utf8' }).stdout.trim();
      assert.equal(Number(owner), user.uid, 'the server runs as nobody');
    }
    server.kill('SIGTERM');
    assert.equal(await exited, 0, `clean exit on SIGTERM:\n${logs}`);
  });
});
