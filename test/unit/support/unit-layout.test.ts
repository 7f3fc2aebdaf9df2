// test/unit/ mirrors the code it tests: one folder per folder of src/ (and scripts/, tools/, and
// support/ for the test harness itself, entry/ for the files at src/'s top: main.ts, program.ts,
// process-settings.ts). `npm test` and `npm run test:unit` run
// dist/test/unit/*/*.test.js, so a test file anywhere else would never run: this keeps that from
// happening unnoticed.

import assert from 'node:assert/strict';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { repoRoot } from '../../../scripts/repo-root.js';

const UNIT = join(repoRoot(), 'test', 'unit');
const BUILD_TIME = ['scripts', 'tools', 'support', 'entry'];

describe('test/unit mirrors src/', () => {
  it('holds folders only, each named after a folder of src/ (or scripts, tools, support, entry), each with tests', () => {
    const src = new Set(
      readdirSync(join(repoRoot(), 'src'), { withFileTypes: true })
        .filter((entry) => entry.isDirectory())
        .map((entry) => entry.name),
    );
    const entries = readdirSync(UNIT, { withFileTypes: true });
    const files = entries.filter((entry) => !entry.isDirectory()).map((entry) => entry.name);
    assert.deepEqual(files, [], 'files directly in test/unit/ are never run: move them into the folder of what they test');
    for (const folder of entries.map((entry) => entry.name)) {
      assert.ok(src.has(folder) || BUILD_TIME.includes(folder), `test/unit/${folder}/ names no folder of src/`);
      const inside = readdirSync(join(UNIT, folder), { withFileTypes: true });
      assert.deepEqual(
        inside.filter((entry) => entry.isDirectory()).map((entry) => entry.name),
        [],
        `test/unit/${folder}/ is one level deep (the test command runs test/unit/*/*.test.js)`,
      );
      assert.ok(
        inside.some((entry) => entry.name.endsWith('.test.ts')),
        `test/unit/${folder}/ holds a test`,
      );
    }
  });
});
