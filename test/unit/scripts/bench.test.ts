// The benchmark's own logic: statistics, Prometheus histogram arithmetic, the baseline Envoy
// config derivation, CPU-profile summaries, and the benchmark model server's stream contract.

import assert from 'node:assert/strict';
import type { Agent } from 'node:http';
import { describe, it } from 'node:test';
import type { TestContext } from 'node:test';
import { DEFAULT_GATEWAY_OPTIONS, renderGatewayConfig } from '../../../tools/envoy-config/gateway-config.js';
import { Metrics } from '../../../src/metrics/metrics.js';
import { withoutExtProc } from '../../../scripts/bench/baseline-config.js';
import { codeArea, summarizeProfile } from '../../../scripts/bench/cpu-profile.js';
import type { CpuProfile } from '../../../scripts/bench/cpu-profile.js';
import { keepAliveAgent, timedRequest, timedStream } from '../../../scripts/bench/load.js';
import {
  histogramDelta,
  histogramQuantile,
  parseHistogram,
  percentile,
  replaceBetweenMarkers,
  summarize,
} from '../../../scripts/bench/stats.js';
import { addServerDelta, serverSnapshot } from '../../../scripts/bench/server-stats.js';
import { startBenchUpstream } from '../../../scripts/bench/upstream.js';
import { parseProbeLine, renderMemoryTable, RSS_TARGET_BYTES } from '../../../scripts/bench/memory.js';
import { spawnNode } from '../../../scripts/bench/processes.js';

describe('bench statistics', () => {
  it('nearest-rank percentiles', () => {
    const sorted = Float64Array.from({ length: 100 }, (_, i) => i + 1);
    assert.equal(percentile(sorted, 50), 50);
    assert.equal(percentile(sorted, 99), 99);
    assert.equal(percentile(sorted, 100), 100);
    assert.equal(percentile([7], 1), 7);
    assert.ok(Number.isNaN(percentile([], 50)));
  });

  it('summarizes unsorted samples', () => {
    const s = summarize([5, 1, 4, 2, 3]);
    assert.deepEqual({ n: s.n, mean: s.mean, p50: s.p50, max: s.max }, { n: 5, mean: 3, p50: 3, max: 5 });
  });

  it('parses a real prom-client histogram, subtracts scrapes and estimates quantiles', async () => {
    const metrics = new Metrics({ processMetrics: false });
    metrics.messageHandled('request_headers', 0.00002);
    const before = parseHistogram(await metrics.registry.metrics(), 'llm_extproc_message_processing_seconds', 'message');
    for (let i = 0; i < 90; i++) metrics.messageHandled('request_headers', 0.00003); // bucket (25 µs, 50 µs]
    for (let i = 0; i < 10; i++) metrics.messageHandled('request_headers', 0.0007); // bucket (0.5 ms, 1 ms]
    metrics.messageHandled('response_body', 0.2); // beyond the last finite bucket
    const after = parseHistogram(await metrics.registry.metrics(), 'llm_extproc_message_processing_seconds', 'message');

    const delta = histogramDelta(after.get('request_headers')!, before.get('request_headers'));
    assert.equal(delta.count, 100);
    assert.ok(Math.abs(delta.sum - (90 * 0.00003 + 10 * 0.0007)) < 1e-9);
    const p50 = histogramQuantile(delta, 0.5);
    assert.equal(p50.aboveTop, false);
    assert.ok(p50.value > 0.000025 && p50.value <= 0.00005, `p50 ${p50.value}`);
    const p99 = histogramQuantile(delta, 0.99);
    assert.ok(p99.value > 0.0005 && p99.value <= 0.001, `p99 ${p99.value}`);

    const tail = histogramQuantile(after.get('response_body')!, 0.5);
    assert.deepEqual(tail, { value: 0.05, aboveTop: true });
  });

  it("adds up llm-extproc's turnaround over phases from real scrapes, and leaves it out when never reported", async () => {
    const metrics = new Metrics({ processMetrics: false });
    const silent = serverSnapshot(await metrics.registry.metrics());
    assert.equal(silent.turnaround, undefined, 'a transport that never reports it (grpc-js) shows no figure');
    metrics.messageTurnaround(0.00007, 3);
    const first = serverSnapshot(await metrics.registry.metrics());
    metrics.messageTurnaround(0.0003, 2);
    metrics.messageTurnaround(0.004, 1);
    const second = serverSnapshot(await metrics.registry.metrics());
    const phaseOne = addServerDelta(undefined, silent, first);
    const both = addServerDelta(phaseOne, first, second);
    assert.equal(phaseOne.turnaround?.count, 3, 'three replies in one socket write count three times');
    assert.equal(both.turnaround?.count, 6);
    assert.ok(Math.abs((both.turnaround?.sum ?? 0) - (3 * 0.00007 + 2 * 0.0003 + 0.004)) < 1e-12);
    const p99 = histogramQuantile(both.turnaround, 0.99);
    assert.ok(p99.value > 0.0025 && p99.value <= 0.005, `p99 ${p99.value}`);
  });

  it('replaces only the text between the markers', () => {
    const doc = 'intro\n<!-- s -->\nold\n<!-- e -->\noutro\n';
    assert.equal(replaceBetweenMarkers(doc, '<!-- s -->', '<!-- e -->', 'new\n'), 'intro\n<!-- s -->\nnew\n<!-- e -->\noutro\n');
    assert.throws(() => replaceBetweenMarkers('no markers', '<!-- s -->', '<!-- e -->', 'x'), /not found/);
  });
});

describe('bench baseline config', () => {
  const rendered = renderGatewayConfig({
    ...DEFAULT_GATEWAY_OPTIONS,
    extProc: 'unix:///tmp/x.sock',
    backends: { kind: 'static', addresses: ['127.0.0.1:8000'] },
  });

  it('drops exactly the ext_proc filter, its cluster and the access log to it, and leaves the rest identical', () => {
    const baseline = withoutExtProc(rendered);
    const text = JSON.stringify(baseline);
    assert.ok(!text.includes('envoy.filters.http.ext_proc'));
    assert.ok(!text.includes('"llm_extproc"'));
    // Put the removed pieces back: the result must equal the original.
    const original = JSON.parse(JSON.stringify(rendered)) as {
      static_resources: {
        listeners: { filter_chains: { filters: { typed_config: { http_filters: unknown[]; access_log?: unknown[] } }[] }[] }[];
        clusters: { name: string }[];
      };
    };
    const hcm = original.static_resources.listeners[0].filter_chains[0].filters[0].typed_config;
    hcm.http_filters = hcm.http_filters.slice(1);
    delete hcm.access_log;
    original.static_resources.clusters = original.static_resources.clusters.filter((c) => c.name !== 'llm_extproc');
    assert.deepEqual(baseline, original);
  });

  it('does not modify its input and refuses a config without ext_proc', () => {
    const before = JSON.stringify(rendered);
    const baseline = withoutExtProc(rendered);
    assert.equal(JSON.stringify(rendered), before);
    assert.throws(() => withoutExtProc(baseline), /expected one envoy\.filters\.http\.ext_proc filter/);
  });
});

describe('bench CPU profile summary', () => {
  it('attributes self time per function and area, ignoring idle', () => {
    const frame = (functionName: string, url: string, lineNumber = 0) => ({ functionName, url, lineNumber });
    const profile: CpuProfile = {
      nodes: [
        { id: 1, callFrame: frame('(idle)', '') },
        { id: 2, callFrame: frame('respond', 'node:internal/http2/core', 10) },
        { id: 3, callFrame: frame('process', 'file:///repo/dist/src/extproc/processor.js', 4) },
        { id: 4, callFrame: frame('encode', 'file:///repo/node_modules/protobufjs/src/writer.js', 1) },
      ],
      samples: [1, 2, 3, 3, 4, 1],
      timeDeltas: [5000, 1000, 1000, 1000, 1000, 9000],
    };
    const summary = summarizeProfile(profile);
    assert.equal(summary.busyMs, 4);
    assert.deepEqual(
      summary.areas.map((a) => [a.name, a.share]),
      [
        ['llm-extproc src/extproc', 0.5],
        ['node:internal/http2', 0.25],
        ['protobufjs', 0.25],
      ],
    );
    assert.equal(summary.functions[0].name, 'process src/extproc/processor.js:5');
    assert.equal(codeArea(frame('(garbage collector)', '')), '(garbage collector)');
  });
});

describe('bench model server', () => {
  async function upstreamFor(t: TestContext, events: number, eventDelayMs: number) {
    const upstream = await startBenchUpstream({ id: 'u', host: '127.0.0.1', events, eventDelayMs });
    const agent: Agent = keepAliveAgent(1);
    t.after(async () => {
      agent.destroy();
      await upstream.close();
    });
    return { port: Number(upstream.address.split(':')[1]), agent };
  }

  it('streams exactly N stamped events on a fixed schedule, then [DONE]', async (t) => {
    const target = await upstreamFor(t, 20, 2);
    const body = Buffer.from(JSON.stringify({ model: 'm', stream: true, messages: [{ role: 'user', content: 'x' }] }));
    const timing = await timedStream(target, body);
    assert.equal(timing.events, 20);
    assert.equal(timing.sawDone, true);
    assert.equal(timing.eventLatencyMs.length, 20);
    assert.equal(timing.interArrivalMs.length, 19);
    // One-way latency on loopback is well below the schedule step; the schedule spans 20 × 2 ms.
    assert.ok(timing.eventLatencyMs.every((ms) => ms >= 0 && ms < 1000));
    assert.ok(timing.totalMs >= 20 * 2 - 1, `total ${timing.totalMs} ms`);
  });

  it('answers non-streaming requests with a JSON body', async (t) => {
    const target = await upstreamFor(t, 1, 0);
    const body = Buffer.from(JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'x' }] }));
    const ms = await timedRequest(target, body);
    assert.ok(ms > 0);
  });
});

describe('bench memory', () => {
  it("reads a real process's memory through the probe: RSS as it was, heap and external after GC", async (t) => {
    const probe = new URL('../../../scripts/bench/memory-probe.js', import.meta.url).href;
    const idle = spawnNode('idle', new URL('../../../scripts/bench/idle-process.js', import.meta.url).pathname, {
      nodeArgs: ['--expose-gc', '--import', probe],
    });
    t.after(() => idle.stop());
    await idle.waitForLine(/^(idle)$/);
    const line = idle.waitForLine(/^(memory-probe .*)$/);
    process.kill(idle.pid, 'SIGUSR2');
    const reading = parseProbeLine(await line);
    assert.ok(reading !== undefined);
    // A bare Node process: tens of MiB resident, a few MiB of heap, some external memory.
    assert.ok(reading.rssBytes > 10 * 1048576 && reading.rssBytes < 200 * 1048576, `rss ${reading.rssBytes}`);
    assert.ok(reading.heapUsedBytes > 0 && reading.heapUsedBytes < reading.rssBytes, `heap ${reading.heapUsedBytes}`);
    assert.ok(reading.externalBytes > 0, `external ${reading.externalBytes}`);
  });

  it('ignores lines that are not the probe', () => {
    assert.equal(parseProbeLine('{"level":30,"msg":"started"}'), undefined);
    assert.equal(parseProbeLine('memory-probe {"rssBytes":1}'), undefined);
  });

  it('renders RSS, heap and external per point, and marks the targeted rows over their ceiling', () => {
    const MiB = 1048576;
    const sample = (rss: number) => ({ rssBytes: rss * MiB, heapUsedBytes: 10 * MiB, externalBytes: 2 * MiB });
    const report = renderMemoryTable(
      [
        { label: 'bare', samples: { idle: sample(42), load: sample(43) }, peakBytes: undefined, targeted: false },
        { label: 'ours', samples: { idle: sample(60), load: sample(80) }, peakBytes: 90 * MiB, targeted: true },
        { label: 'other', samples: { idle: sample(70), load: sample(80) }, peakBytes: undefined, targeted: false },
      ],
      ['idle', 'load'],
      'npm run bench',
      '--max-old-space-size=160',
    );
    assert.equal(RSS_TARGET_BYTES.idle, 65 * MiB);
    const row = (label: string) => report.split('\n').find((l) => l.startsWith(`| ${label} |`));
    assert.equal(row('bare'), '| bare | 42.0 | 10.0 | 2.0 | 43.0 | 10.0 | 2.0 | – |');
    assert.equal(row('ours'), '| ours | 60.0 | 10.0 | 2.0 | 80.0 (over) | 10.0 | 2.0 | 90.0 |');
    assert.equal(row('other'), '| other | 70.0 | 10.0 | 2.0 | 80.0 | 10.0 | 2.0 | – |', 'no target for untargeted rows');
    assert.match(report, /ours: not met \(after the request and stream load\)/);
    // The heap limit changes how V8 grows the heap: a reader must see which one the figures had.
    assert.match(report, /NODE_OPTIONS `--max-old-space-size=160`/);
  });
});
