#!/usr/bin/env node
// What ships: one esbuild bundle of the compiled server (dist/src, from `tsc`) and the production
// dependencies it imports, in dist/bundle/. The container image runs it (Dockerfile), `npm run
// bundle` makes it here so the bench can measure what ships.
//
// - ESM with code splitting: a dynamic `import()` (the Kubernetes source, the OpenTelemetry SDK,
//   whatever the server loads only when configured) stays a chunk of its own under chunks/, loaded
//   when used, instead of being inlined into the startup path.
// - No source maps, nothing a bundle does not run (dev dependencies, tests, build-time tools).
// - CommonJS dependencies keep working inside ESM: each file gets a `require` of its own
//   (`createRequire`) for the Node built-ins they require.
// - The licenses of every bundled package, in THIRD-PARTY-NOTICES.txt beside the code (their
//   notices must travel with copies of their code; the bundle drops the packages' own files).
//
// Usage: node scripts/bundle.mjs [--root DIR]
//   DIR/dist/bundle/ receives the bundle (default: the repository, i.e. ./dist/bundle). With a DIR
//   other than the repository (the image build), DIR/package.json gets the package's name, version
//   and `"type": "module"` (the server reads its version from it; Node needs the type for the .js files).
// Prints the bundle's directory and size on stdout.
import { existsSync, mkdirSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const ENTRY = join(REPO, 'dist', 'src', 'main.js');
/** Optional native add-ons some dependencies try (`ws`): absent, and their absence is handled where required. */
const OPTIONAL_NATIVE = ['bufferutil', 'utf-8-validate'];
// Each output file (entry and chunks) gets its own `require` for the CommonJS code bundled into it.
const BANNER =
  "import { createRequire as __llmExtprocCreateRequire } from 'node:module';\nconst require = __llmExtprocCreateRequire(import.meta.url);";

function parseArgs(argv) {
  const i = argv.indexOf('--root');
  return { root: i === -1 ? REPO : resolve(argv[i + 1] ?? '') };
}

/** Total size in bytes of the files under `dir`. */
function sizeOf(dir) {
  return readdirSync(dir, { withFileTypes: true }).reduce((sum, e) => {
    const path = join(dir, e.name);
    return sum + (e.isDirectory() ? sizeOf(path) : statSync(path).size);
  }, 0);
}

/** `node_modules/<name>` (or `node_modules/@scope/<name>`) of a bundled input path, the innermost one. */
function packageDirOf(input) {
  const parts = input.split('/');
  const at = parts.lastIndexOf('node_modules');
  if (at === -1) return undefined;
  const length = parts[at + 1]?.startsWith('@') ? 2 : 1;
  return parts.slice(0, at + 1 + length).join('/');
}

/** The license texts of every package with code in the bundle, one section per package. */
function thirdPartyNotices(inputs) {
  const dirs = [...new Set(inputs.map(packageDirOf).filter((d) => d !== undefined))].sort();
  const sections = dirs.map((dir) => {
    const abs = join(REPO, dir);
    const pkg = JSON.parse(readFileSync(join(abs, 'package.json'), 'utf8'));
    const licenseFile = readdirSync(abs).find((f) => /^(licen[cs]e|copying)(\.|$)/i.test(f));
    const text =
      licenseFile === undefined
        ? `(no license file in the package; package.json says: ${pkg.license ?? 'nothing'})`
        : readFileSync(join(abs, licenseFile), 'utf8').trim();
    return `${pkg.name}@${pkg.version} (${pkg.license ?? 'see text'})\n\n${text}\n`;
  });
  return `Third-party software in this bundle, with its license texts.\n\n${sections.join(`\n${'-'.repeat(72)}\n\n`)}`;
}

async function main() {
  const { root } = parseArgs(process.argv.slice(2));
  if (!existsSync(ENTRY)) throw new Error(`${relative(process.cwd(), ENTRY)} is missing: run \`tsc\` first (npm run bundle does)`);
  const outdir = join(root, 'dist', 'bundle');
  rmSync(outdir, { recursive: true, force: true });
  mkdirSync(outdir, { recursive: true });
  const result = await build({
    entryPoints: { main: ENTRY },
    outdir,
    bundle: true,
    splitting: true,
    format: 'esm',
    platform: 'node',
    target: 'node20',
    chunkNames: 'chunks/[name]-[hash]',
    sourcemap: false,
    // License comments go to THIRD-PARTY-NOTICES.txt with the full texts instead.
    legalComments: 'none',
    external: OPTIONAL_NATIVE,
    banner: { js: BANNER },
    metafile: true,
    logLevel: 'warning',
  });
  writeFileSync(join(outdir, 'THIRD-PARTY-NOTICES.txt'), thirdPartyNotices(Object.keys(result.metafile.inputs)));
  if (root !== REPO) {
    const pkg = JSON.parse(readFileSync(join(REPO, 'package.json'), 'utf8'));
    writeFileSync(
      join(root, 'package.json'),
      `${JSON.stringify({ name: pkg.name, version: pkg.version, license: pkg.license, type: 'module' }, null, 2)}\n`,
    );
  }
  process.stdout.write(`${JSON.stringify({ bundle: outdir, bytes: sizeOf(outdir) })}\n`);
}

main().catch((err) => {
  process.stderr.write(`bundle: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exitCode = 1;
});
