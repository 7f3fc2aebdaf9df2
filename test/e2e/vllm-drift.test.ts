// Drift between our fake model server (test/support/model-server.ts, which most of the suite
// runs against because it fails on command) and a real vLLM 0.32 (test/support/vllm-server.ts):
// for every metric, header, error shape and stream detail the fake imitates, the same request to
// both and a field-by-field comparison. A field the fake sends must exist in vLLM's answer with
// the same JSON type (vLLM sends many more, which the fake need not); constants (object names,
// event types, the order of a stream's kinds of chunk) must be equal. What the fake makes
// different on purpose is listed in DELIBERATE, with why. When vLLM changes, this test says where.

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import parsePrometheusTextFormat from 'parse-prometheus-text-format';
import { startModelServer, vllmMetricsText, type ModelServer } from '../support/model-server.js';
import { rawRequest, type RawResponse } from '../support/raw-http.js';
import { startVllmServers, stopVllmServers, vllmUnavailable, VLLM_MODEL, type VllmServer } from '../support/vllm-server.js';

const unavailable = await vllmUnavailable();

/**
 * What the fake does differently on purpose (values only: the fields exist and have vLLM's types):
 * - `x-model-server-id` header, `system_fingerprint` and `owned_by` carry the fake's id, so a test
 *   sees which replica answered (vLLM: no such header; `vllm-<version>-<hash>`; `vllm`);
 * - ids and `created` are derived from the request, so answers are byte-for-byte repeatable;
 * - the text is a sentence naming the server and echoing the prompt, one word per token, and
 *   token counts are words (vLLM: its tokenizer's tokens);
 * - a normal answer ends with finish_reason `stop` (the tests ask for `length`-free answers).
 */
const DELIBERATE_HEADERS = new Set(['x-model-server-id']);

/** vLLM fields that are null or a value by circumstance (Optional in its schema). */
const NULLABLE = new Set(['param', 'logprobs', 'finish_reason', 'stop_reason', 'usage', 'incomplete_details', 'code']);

function kindOf(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'array';
  return typeof value;
}

/**
 * Where the fake's JSON differs from vLLM's in shape: a field vLLM does not send, or a different
 * type. Arrays are compared element by element as far as both go.
 */
function shapeDiff(fake: unknown, real: unknown, path = '$'): string[] {
  const fk = kindOf(fake);
  const rk = kindOf(real);
  const key = path.slice(path.lastIndexOf('.') + 1);
  if (fk !== rk) {
    if ((fk === 'null' || rk === 'null') && NULLABLE.has(key)) return [];
    return [`${path}: the fake sends ${fk}, vLLM ${rk}`];
  }
  if (fk === 'array') {
    const f = fake as unknown[];
    const r = real as unknown[];
    return f.slice(0, r.length).flatMap((item, i) => shapeDiff(item, r[i], `${path}[${i}]`));
  }
  if (fk === 'object') {
    const f = fake as Record<string, unknown>;
    const r = real as Record<string, unknown>;
    return Object.keys(f).flatMap((k) =>
      k in r ? shapeDiff(f[k], r[k], `${path}.${k}`) : [`${path}.${k}: the fake sends it, vLLM does not`],
    );
  }
  return [];
}

interface Exchange {
  readonly status: number;
  readonly headers: Record<string, string>;
  readonly text: string;
}

function exchange(res: RawResponse): Exchange {
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(res.headers)) if (typeof value === 'string') headers[name] = value;
  return { status: res.status, headers, text: res.body.toString('utf8') };
}

/** The headers the fake sets that describe the answer, against vLLM's (transport ones like date and connection aside). */
function headerDiff(fake: Exchange, real: Exchange): string[] {
  const meaningful = ['content-type', 'cache-control', 'content-encoding'];
  const out: string[] = [];
  for (const name of meaningful) {
    if (fake.headers[name] !== real.headers[name]) out.push(`${name}: the fake sends ${fake.headers[name]}, vLLM ${real.headers[name]}`);
  }
  const framing = (e: Exchange): string =>
    e.headers['transfer-encoding'] === 'chunked' ? 'chunked' : e.headers['content-length'] !== undefined ? 'length' : 'close';
  if (framing(fake) !== framing(real)) out.push(`framing: the fake ${framing(fake)}, vLLM ${framing(real)}`);
  for (const name of Object.keys(fake.headers)) {
    if (name.startsWith('x-') && !DELIBERATE_HEADERS.has(name) && !(name in real.headers))
      out.push(`${name}: the fake sends it, vLLM does not`);
  }
  return out;
}

interface SseEvent {
  readonly event: string | undefined;
  readonly data: string;
}

/** The events of a stream, checking the framing vLLM uses: `[event: X\n]data: Y\n\n`, LF only. */
function sseEvents(text: string): SseEvent[] {
  assert.ok(text.endsWith('\n\n'), 'a stream ends with a blank line');
  assert.ok(!text.includes('\r'), 'LF line ends only');
  return text
    .slice(0, -2)
    .split('\n\n')
    .map((block) => {
      const match = /^(?:event: ([^\n]+)\n)?data: ([^\n]*)$/.exec(block);
      assert.ok(match, `an event is one optional event: line and one data: line: ${JSON.stringify(block)}`);
      return { event: match[1], data: match[2] };
    });
}

/** What a chat or completion chunk is, by the fields that make it one, with consecutive repeats collapsed. */
function chunkKinds(events: readonly SseEvent[]): string[] {
  const kinds = events.map((e) => {
    if (e.data === '[DONE]') return '[DONE]';
    const c = JSON.parse(e.data) as Record<string, unknown>;
    const choices = c['choices'] as Array<Record<string, unknown>>;
    const parts: string[] = [];
    if (choices.length === 0) parts.push('no-choices');
    for (const choice of choices) {
      const delta = choice['delta'] as Record<string, unknown> | undefined;
      if (delta?.['role'] !== undefined) parts.push('role');
      else if (delta?.['content'] !== undefined || choice['text'] !== undefined) parts.push('token');
      if (choice['finish_reason'] !== null) parts.push('finish');
    }
    if (c['usage'] !== undefined && c['usage'] !== null) parts.push('usage');
    if (c['system_fingerprint'] !== undefined) parts.push('fingerprint');
    return parts.join('+');
  });
  return kinds.filter((k, i) => k !== kinds[i - 1]);
}

/** The first event of each kind, to compare shapes kind by kind. */
function firstOfEachKind(events: readonly SseEvent[], kindOfEvent: (e: SseEvent) => string): Map<string, unknown> {
  const out = new Map<string, unknown>();
  for (const e of events) {
    if (e.data === '[DONE]') continue;
    const kind = kindOfEvent(e);
    if (!out.has(kind)) out.set(kind, JSON.parse(e.data));
  }
  return out;
}

describe('drift: our fake model server against real vLLM, field by field', { skip: unavailable }, () => {
  let real: VllmServer;
  let fake: ModelServer;

  before(async () => {
    [real] = await startVllmServers([{ id: 'drift' }]);
    fake = await startModelServer({ id: 'fake', models: [VLLM_MODEL] });
  });

  after(async () => {
    await fake?.close();
    if (real !== undefined) await stopVllmServers([real]);
  });

  async function both(
    path: string,
    body?: Record<string, unknown> | string,
    method = body === undefined ? 'GET' : 'POST',
  ): Promise<[Exchange, Exchange]> {
    const ask = async (address: string): Promise<Exchange> =>
      exchange(await rawRequest({ url: `http://${address}${path}`, method, ...(body === undefined ? {} : { body }), timeoutMs: 60_000 }));
    return Promise.all([ask(fake.address), ask(real.address)]);
  }

  const generation = { temperature: 0, max_tokens: 4, ignore_eos: true };
  const messages = [{ role: 'user', content: 'Say hello to the billing team.' }];

  it('GET /health: an empty 200, without a content-type', async () => {
    const [f, r] = await both('/health');
    assert.equal(f.status, r.status);
    assert.equal(f.text, r.text);
    assert.deepEqual(headerDiff(f, r), []);
  });

  it('GET /v1/models: the list and model objects', async () => {
    const [f, r] = await both('/v1/models');
    assert.equal(f.status, r.status);
    assert.deepEqual(headerDiff(f, r), []);
    const fj = JSON.parse(f.text) as { object: string; data: Array<{ id: string; object: string }> };
    const rj = JSON.parse(r.text) as typeof fj;
    assert.deepEqual(shapeDiff(fj, rj), []);
    assert.equal(fj.object, rj.object);
    assert.deepEqual(
      fj.data.map((m) => [m.id, m.object]),
      rj.data.map((m) => [m.id, m.object]),
    );
  });

  it("GET /metrics: every family the fake exposes has vLLM's name, type, help and labels", async () => {
    const [f, r] = await both('/metrics');
    assert.equal(f.headers['content-type'], r.headers['content-type']);
    const families = (text: string): Map<string, { type: string; help: string; labels: string[] }> =>
      new Map(
        parsePrometheusTextFormat(text).map((family) => [
          family.name,
          { type: family.type, help: family.help, labels: [...new Set(family.metrics.flatMap((m) => Object.keys(m.labels ?? {})))].sort() },
        ]),
      );
    const realFamilies = families(r.text);
    const fakeFamilies = families(f.text);
    assert.ok(fakeFamilies.size >= 3);
    for (const [name, family] of fakeFamilies) assert.deepEqual(family, realFamilies.get(name), name);
    // The picker reads these three; vLLM 0.32 no longer has gpu_cache_usage_perc.
    for (const name of ['vllm:num_requests_waiting', 'vllm:num_requests_running', 'vllm:kv_cache_usage_perc'])
      assert.ok(realFamilies.has(name), name);
    assert.ok(!realFamilies.has('vllm:gpu_cache_usage_perc'));
    // LoRA adapters (vllm:lora_requests_info) appear only with --enable-lora: the fake's form of it is
    // the one the picker's unit tests pin (test/unit/server-metrics.test.ts), not compared here.
    assert.ok(!realFamilies.has('vllm:lora_requests_info'));
    assert.ok(vllmMetricsText(VLLM_MODEL, { runningAdapters: ['a'] }).includes('vllm:lora_requests_info'));
  });

  for (const [path, body] of [
    ['/v1/chat/completions', { model: VLLM_MODEL, messages, ...generation }],
    ['/v1/completions', { model: VLLM_MODEL, prompt: 'Say hello', ...generation }],
    ['/v1/responses', { model: VLLM_MODEL, input: 'Say hello', temperature: 0, max_output_tokens: 4 }],
  ] as const) {
    it(`POST ${path}: the JSON answer`, async () => {
      const [f, r] = await both(path, body);
      assert.equal(r.status, 200, r.text);
      assert.equal(f.status, r.status);
      assert.deepEqual(headerDiff(f, r), []);
      const fj = JSON.parse(f.text) as Record<string, unknown>;
      const rj = JSON.parse(r.text) as Record<string, unknown>;
      assert.deepEqual(shapeDiff(fj, rj), []);
      assert.equal(fj['object'], rj['object']);
    });
  }

  for (const [path, body] of [
    ['/v1/chat/completions', { model: VLLM_MODEL, messages, ...generation }],
    ['/v1/completions', { model: VLLM_MODEL, prompt: 'Say hello', ...generation }],
  ] as const) {
    for (const includeUsage of [false, true]) {
      it(`POST ${path} streamed, ${includeUsage ? 'with' : 'without'} the usage chunk: headers, framing, the order of chunk kinds, each kind's shape`, async () => {
        const [f, r] = await both(path, { ...body, stream: true, ...(includeUsage ? { stream_options: { include_usage: true } } : {}) });
        assert.equal(r.status, 200, r.text);
        assert.deepEqual(headerDiff(f, r), []);
        const fe = sseEvents(f.text);
        const re = sseEvents(r.text);
        assert.deepEqual(chunkKinds(fe), chunkKinds(re));
        const kind = (e: SseEvent): string => chunkKinds([e])[0] ?? '';
        const realKinds = firstOfEachKind(re, kind);
        for (const [k, chunk] of firstOfEachKind(fe, kind)) assert.deepEqual(shapeDiff(chunk, realKinds.get(k)), [], k);
        if (includeUsage) {
          // usage-chunk-filter.ts finds the usage chunk by this exact text in compact JSON.
          const usage = re.find((e) => e.data.includes('"usage"'));
          assert.ok(usage?.data.includes('"choices":[]'), `vLLM's usage chunk: ${usage?.data}`);
        }
      });
    }
  }

  it('POST /v1/responses streamed: the same events in the same order, each named twice alike, each of its shape', async () => {
    const body = { model: VLLM_MODEL, input: 'Say hello', temperature: 0, max_output_tokens: 4, stream: true };
    const [f, r] = await both('/v1/responses', body);
    assert.equal(r.status, 200, r.text);
    assert.deepEqual(headerDiff(f, r), []);
    const fe = sseEvents(f.text);
    const re = sseEvents(r.text);
    const names = (events: readonly SseEvent[]): string[] => events.map((e) => e.event ?? '').filter((n, i, all) => n !== all[i - 1]);
    assert.deepEqual(names(fe), names(re));
    for (const e of [...fe, ...re]) assert.equal((JSON.parse(e.data) as { type: string }).type, e.event);
    const realKinds = firstOfEachKind(re, (e) => e.event ?? '');
    for (const [k, event] of firstOfEachKind(fe, (e) => e.event ?? '')) assert.deepEqual(shapeDiff(event, realKinds.get(k)), [], k);
  });

  it("errors: the fake's JSON errors have vLLM's shape, type names and codes", async () => {
    // Unknown model → 404; max_tokens past the context → 400: the fake's json-error fault with those statuses.
    const cases = [
      { status: 404, body: { model: 'ghost-model', messages } },
      { status: 400, body: { model: VLLM_MODEL, messages, max_tokens: 5000 } },
    ];
    for (const c of cases) {
      const r = exchange(await rawRequest({ url: `http://${real.address}/v1/chat/completions`, method: 'POST', body: c.body }));
      assert.equal(r.status, c.status, r.text);
      fake.nextBehavior({ kind: 'json-error', status: c.status });
      const f = exchange(await rawRequest({ url: `http://${fake.address}/v1/chat/completions`, method: 'POST', body: c.body }));
      assert.equal(f.status, c.status);
      assert.deepEqual(headerDiff(f, r), []);
      const fj = JSON.parse(f.text) as { error: { type: string; code: number } };
      const rj = JSON.parse(r.text) as typeof fj;
      assert.deepEqual(shapeDiff(fj, rj), []);
      assert.equal(fj.error.type, rj.error.type);
      assert.equal(fj.error.code, rj.error.code);
    }
    // A mid-stream error event carries the same error object (vLLM's create_streaming_error_response
    // writes its ErrorResponse there): the fake's sse-error-event against vLLM's error body.
    fake.nextBehavior({ kind: 'sse-error-event', afterEvents: 1 });
    const streamed = sseEvents(
      exchange(
        await rawRequest({
          url: `http://${fake.address}/v1/chat/completions`,
          method: 'POST',
          body: { model: VLLM_MODEL, messages, stream: true },
        }),
      ).text,
    );
    const errorEvent = JSON.parse(streamed.find((e) => e.data.includes('"error"'))?.data ?? '{}') as unknown;
    const realError = JSON.parse(
      exchange(await rawRequest({ url: `http://${real.address}/v1/chat/completions`, method: 'POST', body: cases[0].body })).text,
    ) as unknown;
    assert.deepEqual(shapeDiff(errorEvent, realError), []);
  });

  it('errors: an unparsable body and an unknown path are answered like vLLM', async () => {
    const [badF, badR] = await both('/v1/chat/completions', '{bad json');
    assert.equal(badF.status, badR.status);
    assert.deepEqual(headerDiff(badF, badR), []);
    const fj = JSON.parse(badF.text) as { error: { type: string } };
    const rj = JSON.parse(badR.text) as typeof fj;
    assert.deepEqual(shapeDiff(fj, rj), []);
    assert.equal(fj.error.type, rj.error.type);
    const [pathF, pathR] = await both('/v1/nothing');
    assert.equal(pathF.status, pathR.status);
    assert.deepEqual(headerDiff(pathF, pathR), []);
    assert.equal(pathF.text, pathR.text);
  });
});
