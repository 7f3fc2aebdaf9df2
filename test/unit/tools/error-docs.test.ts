import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { ENDPOINT_STATES } from '../../../src/endpoints/model.js';
import { ERROR_KINDS } from '../../../src/errors/catalog.js';
import { ENDPOINT_TRANSITIONS, renderErrorDocs } from '../../../tools/error-docs.js';

// Compiled to dist/test/unit/tools/, so the repository root is four levels up.
const DOC_PATH = fileURLToPath(new URL('../../../../docs/errors.md', import.meta.url));

void describe('docs/errors.md', () => {
  const generated = renderErrorDocs();

  void it('is up to date with the code', () => {
    let committed = '';
    try {
      committed = readFileSync(DOC_PATH, 'utf8');
    } catch {
      assert.fail(`${DOC_PATH} is missing: run \`npm run docs:errors\``);
    }
    assert.ok(committed === generated, 'docs/errors.md is stale: run `npm run docs:errors` and commit the result');
  });

  void it('documents every error kind', () => {
    for (const kind of ERROR_KINDS) assert.ok(generated.includes(`| \`${kind}\` |`), `${kind} missing from the catalog table`);
  });

  void it('draws every endpoint state, each reachable from the start', () => {
    const diagram = /```mermaid\n([\s\S]*?)```/.exec(generated)?.[1] ?? '';
    assert.match(diagram, /^stateDiagram-v2/);
    for (const state of ENDPOINT_STATES)
      assert.ok(diagram.includes(`${state} -->`) || diagram.includes(`--> ${state}`), `${state} not in diagram`);

    const reached = new Set<string>(['[*]']);
    let grew = true;
    while (grew) {
      grew = false;
      for (const [from, to] of ENDPOINT_TRANSITIONS) {
        if (reached.has(from) && !reached.has(to)) {
          reached.add(to);
          grew = true;
        }
      }
    }
    for (const state of ENDPOINT_STATES) assert.ok(reached.has(state), `${state} unreachable`);
  });

  void it('shows only Ready as routable', () => {
    const rows = generated.split('\n').filter((l) => /^\| \w+ \| (yes|no) \|/.test(l));
    assert.equal(rows.length, ENDPOINT_STATES.length);
    const routable = rows.filter((l) => l.includes('| yes |')).map((l) => l.split('|')[1]?.trim());
    assert.deepEqual(routable, ['Ready']);
  });
});
