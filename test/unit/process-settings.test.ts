// The memory settings the entry applies (src/process-settings.ts): that they really bound V8's
// young generation when set at run time (a Node upgrade that stopped honouring the flag would make
// this fail, not quietly cost memory again), and that an operator's own sizing wins.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { describe, it } from 'node:test';
import { youngGenerationSizedByOperator } from '../../src/process-settings.js';

const SETTINGS = new URL('../../src/process-settings.js', import.meta.url).href;

/**
 * The largest young generation (V8's new space, both semi-spaces) a child process reaches while it
 * allocates a stream of short-lived objects, some of which survive a while, as requests do.
 */
function peakYoungGenerationBytes(apply: boolean): number {
  const script = `
    import { getHeapSpaceStatistics } from 'node:v8';
    const { applyProcessSettings } = await import(${JSON.stringify(SETTINGS)});
    if (${apply}) applyProcessSettings([], undefined);
    const size = () => getHeapSpaceStatistics().find((s) => s.space_name === 'new_space').space_size;
    let kept = [];
    let peak = size();
    for (let round = 0; round < 400; round++) {
      for (let i = 0; i < 10000; i++) {
        const o = { id: i, name: 'request-' + i, pieces: [i, i + 1] };
        if (i % 50 === 0) kept.push(o);
      }
      if (kept.length > 20000) kept = [];
      peak = Math.max(peak, size());
    }
    process.stdout.write(String(peak));
  `;
  const run = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8', timeout: 120_000 });
  assert.equal(run.status, 0, run.stderr);
  return Number(run.stdout);
}

const MiB = 1024 * 1024;

void describe('process settings', () => {
  void it('keep the young generation at its initial size under an allocation load that grows it eightfold without them', () => {
    const without = peakYoungGenerationBytes(false);
    const withSettings = peakYoungGenerationBytes(true);
    assert.ok(without >= 8 * MiB, `without the settings the load grows the young generation (${without / MiB} MiB)`);
    assert.ok(withSettings <= 2 * MiB, `with them it stays at its initial 2 MiB (${withSettings / MiB} MiB)`);
  });

  void it('leave the young generation alone when the operator sized it (node flags or NODE_OPTIONS)', () => {
    assert.equal(youngGenerationSizedByOperator([], undefined), false);
    assert.equal(youngGenerationSizedByOperator(['--max-old-space-size=256'], '--enable-source-maps'), false);
    assert.equal(youngGenerationSizedByOperator(['--max-semi-space-size=8'], undefined), true);
    assert.equal(youngGenerationSizedByOperator([], '--enable-source-maps --max_semi_space_size=4'), true);
    assert.equal(youngGenerationSizedByOperator([], '--min-semi-space-size=2'), true);
    assert.equal(youngGenerationSizedByOperator(['--semi-space-growth-factor=2'], undefined), true);
  });
});
