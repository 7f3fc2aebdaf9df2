// The long-prompt rows of the benchmark: bodies of the size they claim that a model server takes
// as chat requests, and a report that compares each setup with Envoy alone and with the floor of
// its own body mode.

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { LONG_PROMPT_BYTES, longPromptBody, renderLongPromptReport } from '../../../scripts/bench/long-prompts.js';
import type { LongPromptPhase } from '../../../scripts/bench/long-prompts.js';

const phase = (latenciesMs: number[], serverSeconds: number | undefined): LongPromptPhase => ({
  latenciesMs,
  errors: 0,
  firstError: undefined,
  cpu: { envoySeconds: 0.01, serverSeconds },
});

void describe('long-prompt bench rows', () => {
  void it('builds chat bodies of about the named size, with the long context in a shared turn', () => {
    for (const bytes of LONG_PROMPT_BYTES) {
      const body = longPromptBody('m', bytes);
      assert.ok(body.length >= bytes && body.length < bytes + 200, `${body.length} bytes for ${bytes}`);
      const parsed = JSON.parse(body.toString('utf8')) as { model: string; messages: Array<{ role: string; content: string }> };
      assert.equal(parsed.model, 'm');
      assert.deepEqual(
        parsed.messages.map((m) => m.role),
        ['system', 'user', 'assistant', 'user'],
      );
      assert.ok(parsed.messages[1].content.length > bytes / 2);
    }
  });

  void it('reports added latency against Envoy alone and against the floor of the same body mode', () => {
    const size = LONG_PROMPT_BYTES[0];
    const rows = (ms: number, cpu?: number): Map<number, LongPromptPhase> => new Map([[size, phase([ms, ms, ms], cpu)]]);
    const report = renderLongPromptReport({
      bySetup: new Map([
        ['base', rows(10)],
        ['ours', rows(13, 0.006)],
        ['ours duplex', rows(18, 0.009)],
        ['floor', rows(12)],
        ['floor duplex', rows(14)],
      ]),
      baselineLabel: 'base',
      floorLabel: 'floor',
      floorDuplexLabel: 'floor duplex',
      duplexLabels: new Set(['ours duplex', 'floor duplex']),
      command: 'npm run bench',
      machine: 'test',
      requestsPerSize: 3,
    });
    const line = (label: string): string[] =>
      (report.split('\n').find((l) => l.startsWith(`| ${label} |`)) ?? '').split('|').map((c) => c.trim());
    // setup, body, n, p50, p99, added p50, added mean, vs floor, Envoy CPU, ext_proc CPU
    assert.deepEqual(line('ours').slice(6, 11), ['+3.00', '+3.00', '1.50×', '3.33', '2.00']);
    assert.deepEqual(line('ours duplex').slice(6, 9), ['+8.00', '+8.00', '2.00×']);
    assert.equal(line('floor')[8], '');
  });

  void it('leaves the floor ratio out where a difference is noise below Envoy alone', () => {
    const size = LONG_PROMPT_BYTES[0];
    const report = renderLongPromptReport({
      bySetup: new Map([
        ['base', new Map([[size, phase([10], undefined)]])],
        ['ours', new Map([[size, phase([11], 0.001)]])],
        ['floor', new Map([[size, phase([9], undefined)]])],
      ]),
      baselineLabel: 'base',
      floorLabel: 'floor',
      floorDuplexLabel: undefined,
      duplexLabels: new Set(),
      command: 'npm run bench',
      machine: 'test',
      requestsPerSize: 1,
    });
    const ours = (report.split('\n').find((l) => l.startsWith('| ours |')) ?? '').split('|').map((c) => c.trim());
    assert.equal(ours[8], '');
  });
});
