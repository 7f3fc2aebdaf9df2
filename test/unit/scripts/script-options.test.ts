// The npm scripts' flags as a developer meets them: `--help` lists what the script's header
// documents, and a mistyped flag is one line naming it, not a stack trace. Run against the built
// scripts themselves, each in its own process (they exit).
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { repoRoot } from '../../../scripts/repo-root.js';

const root = repoRoot();

function runScript(script: string, args: readonly string[]): { status: number | null; stdout: string; stderr: string } {
  const result = spawnSync(process.execPath, [join(root, 'dist', 'scripts', `${script}.js`), ...args], {
    encoding: 'utf8',
    timeout: 30_000,
  });
  return { status: result.status, stdout: result.stdout, stderr: result.stderr };
}

describe('npm scripts: --help and bad flags', () => {
  for (const script of ['bench', 'bench-cache', 'simulate', 'demo']) {
    it(`${script} --help prints the flags its source documents and exits 0`, () => {
      const { status, stdout, stderr } = runScript(script, ['--help']);
      assert.equal(status, 0, stderr);
      const source = readFileSync(join(root, 'scripts', `${script}.ts`), 'utf8');
      const firstLine = source.split('\n')[0].replace(/^\/\/ ?/, '');
      assert.equal(stdout.split('\n')[0], firstLine);
      assert.match(stdout, /--\w/, 'names at least one flag');
      assert.doesNotMatch(stdout, /^\/\//m, 'comment markers stripped');
    });
  }

  it('an unknown flag is one line naming it, exit status 2, no stack trace', () => {
    const { status, stdout, stderr } = runScript('simulate', ['--sead', '7']);
    assert.equal(status, 2);
    assert.equal(stdout, '');
    assert.match(stderr, /^simulate: .*'--sead'/);
    assert.match(stderr, /--help lists the options/);
    assert.doesNotMatch(stderr, /\n\s+at /, 'no stack trace');
  });

  it('a flag that takes a value, given none, is named the same way', () => {
    const { status, stderr } = runScript('bench', ['--requests']);
    assert.equal(status, 2);
    assert.match(stderr, /^bench: .*--requests/);
  });
});
