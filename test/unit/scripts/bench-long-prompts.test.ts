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
    const columns = ['added p50 ms', 'added mean ms', 'added p50 vs floor', 'Envoy CPU ms/req', 'ext_proc CPU ms/req'];
    assert.deepEqual(
      columns.map((c) => cell(report, 'ours', c)),
      ['+3.00', '+3.00', '1.50×', '3.33', '2.00'],
    );
    assert.deepEqual(
      columns.slice(0, 3).map((c) => cell(report, 'ours duplex', c)),
      ['+8.00', '+8.00', '2.00×'],
    );
    assert.equal(cell(report, 'floor', 'added p50 vs floor'), '');
  });

  void it('reports the tail of the added latency as added p90 over added p50 (the issue-34 target)', () => {
    const size = LONG_PROMPT_BYTES[2];
    const tenth = (median: number, tail: number): number[] => [...Array.from({ length: 8 }, () => median), tail, tail];
    const report = renderLongPromptReport({
      // Envoy alone: 10 ms, its p90 12 ms; ours: 14 ms, p90 22 ms → added 4 ms, added p90 10 ms.
      bySetup: new Map([
        ['base', new Map([[size, phase(tenth(10, 12), undefined)]])],
        ['ours', new Map([[size, phase(tenth(14, 22), 0.01)]])],
      ]),
      baselineLabel: 'base',
      floorLabel: undefined,
      floorDuplexLabel: undefined,
      duplexLabels: new Set(),
      command: 'npm run bench',
      machine: 'test',
      requestsPerSize: 10,
    });
    assert.equal(cell(report, 'ours', 'p90 ms'), '22.00');
    assert.equal(cell(report, 'ours', 'added p90 ms'), '+10.00');
    assert.equal(cell(report, 'ours', 'added p90 ÷ added p50 (target ≤ 1.5×)'), '2.50×');
    assert.equal(cell(report, 'base', 'added p90 ÷ added p50 (target ≤ 1.5×)'), '');
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
    assert.equal(cell(report, 'ours', 'added p50 vs floor'), '');
  });
});

/** The cell of the row `label` under the header `column` of a rendered Markdown table. */
function cell(report: string, label: string, column: string): string {
  const cells = (line: string | undefined): string[] => (line ?? '').split('|').map((c) => c.trim());
  const lines = report.split('\n');
  const header = cells(lines.find((l) => l.startsWith('| setup |')));
  const index = header.indexOf(column);
  assert.ok(index > 0, `no column ${column}`);
  return cells(lines.find((l) => l.startsWith(`| ${label} |`)))[index];
}
