// End to end against real vLLM (0.32, CPU build, a tiny seeded model: test/support/vllm-server.ts)
// through a real Envoy and llm-extproc: what depends on vLLM's own behaviour rather than on what
// our fake model server believes it does. The scraper reading vLLM's metrics and the picker acting
// on them, streams with and without the usage chunk (and our usage injection), the Responses API,
// vLLM's own error answers, and its prefix cache reused when our affinity repeats a prefix, judged
// by vLLM's own counters. Three servers are started once for the file (35-47 s on an idle machine).

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { startGateway, type Gateway } from '../support/gateway.js';
import { metricValue } from '../support/prometheus.js';
import type { ClientRequest } from '../support/http-client.js';
import {
  startVllmServers,
  stopVllmServers,
  vllmUnavailable,
  VLLM_BLOCK_TOKENS,
  VLLM_MODEL,
  type VllmServer,
} from '../support/vllm-server.js';
import { KvEventSubscriber, type KvEvent } from '../support/kv-events.js';
import { waitUntil } from '../support/wait-until.js';

const unavailable = await vllmUnavailable();
const POOL = 'vllm';

/** Fast scrapes (vLLM answers /metrics in a few ms, more when the machine is busy) and vLLM's block size. */
function pickerYaml(extra = ''): string {
  return [
    'picker:',
    '  metrics: { intervalSeconds: 0.1, timeoutSeconds: 2 }',
    // The tiny model's tokenizer makes about 2.8 characters per token of English.
    `  pools: { ${POOL}: { blockTokens: ${VLLM_BLOCK_TOKENS}, charsPerToken: 2.5 } }`,
    extra,
  ].join('\n');
}

function chat(messages: ReadonlyArray<{ role: string; content: string }>, extra: Record<string, unknown> = {}): Record<string, unknown> {
  // ignore_eos (a vLLM extension): the random model could end early; every answer is max_tokens long.
  return { model: VLLM_MODEL, messages, max_tokens: 8, temperature: 0, ignore_eos: true, ...extra };
}

function post(body: Record<string, unknown>, path = '/v1/chat/completions'): ClientRequest {
  return { path, body, timeoutMs: 120_000 };
}

interface SseEvent {
  readonly event: string | undefined;
  readonly data: string;
}

/** The events of an SSE body (exact framing is checked elsewhere; here the content matters). */
function sseEvents(body: string): SseEvent[] {
  return body
    .split('\n\n')
    .filter((block) => block.trim() !== '')
    .map((block) => {
      const lines = block.split('\n');
      const event = lines.find((l) => l.startsWith('event: '))?.slice('event: '.length);
      const data = lines
        .filter((l) => l.startsWith('data: '))
        .map((l) => l.slice('data: '.length))
        .join('\n');
      return { event, data };
    });
}

/** The chat or completion text a stream carried, and its usage chunk if any. */
function streamedText(body: string): { text: string; usage: Record<string, unknown> | undefined; done: boolean; finish: string[] } {
  let text = '';
  let usage: Record<string, unknown> | undefined;
  const finish: string[] = [];
  let done = false;
  for (const e of sseEvents(body)) {
    if (e.data === '[DONE]') {
      done = true;
      continue;
    }
    const chunk = JSON.parse(e.data) as {
      choices: Array<{ delta?: { content?: string }; text?: string; finish_reason: string | null }>;
      usage?: Record<string, unknown>;
    };
    for (const c of chunk.choices) {
      text += c.delta?.content ?? c.text ?? '';
      if (c.finish_reason !== null) finish.push(c.finish_reason);
    }
    if (chunk.usage !== undefined) usage = chunk.usage;
  }
  return { text, usage, done, finish };
}

/** Attempts llm-extproc recorded against each server (which server answered, from our side). */
function attemptsBy(text: string, servers: readonly VllmServer[]): number[] {
  return servers.map((s) => metricValue(text, 'llm_extproc_upstream_attempts_total', { endpoint: s.address, outcome: 'success' }));
}

interface CacheCounters {
  readonly hits: number;
  readonly queries: number;
}

/** vLLM's own prefix-cache counters (tokens), per server. */
async function cacheCounters(servers: readonly VllmServer[]): Promise<CacheCounters[]> {
  return Promise.all(
    servers.map(async (s) => {
      const text = await s.metricsText();
      return { hits: metricValue(text, 'vllm:prefix_cache_hits_total'), queries: metricValue(text, 'vllm:prefix_cache_queries_total') };
    }),
  );
}

interface DebugLoad {
  readonly metrics: string;
  readonly waiting?: number;
  readonly running?: number;
  readonly kvCacheUsage?: number;
  /** The batch size llm-extproc learnt from the server's own gauges (running when some wait). */
  readonly batchLimit?: number;
}

async function debugLoad(gateway: Gateway, address: string): Promise<DebugLoad | undefined> {
  const response = await fetch(`http://127.0.0.1:${gateway.app.httpPort}/debug/endpoints`);
  const body = (await response.json()) as { pools: Array<{ endpoints: Array<{ address: string; load?: DebugLoad }> }> };
  return body.pools.flatMap((p) => p.endpoints).find((e) => e.address === address)?.load;
}

describe('real vLLM behind Envoy and llm-extproc', { skip: unavailable }, () => {
  let servers: VllmServer[] = [];
  const gateways: Gateway[] = [];

  before(async () => {
    // Four requests per batch: a fifth concurrent one waits, so the queue gauge can be seen moving.
    servers = await startVllmServers(['a', 'b', 'c'].map((id) => ({ id, maxNumSeqs: 4 })));
  });

  after(async () => {
    await Promise.all(gateways.map((g) => g.stop()));
    await stopVllmServers(servers);
  });

  async function gateway(configYaml = pickerYaml(), models: readonly string[] = [VLLM_MODEL]): Promise<Gateway> {
    const g = await startGateway({
      pools: [{ name: POOL, models, endpoints: servers.map((s) => ({ address: s.address })) }],
      configYaml,
      debugEndpoints: true,
      // vLLM computes on the same two cores as Envoy and llm-extproc here; Envoy's ext_proc message
      // timeout (1 s in the harness) is not what these tests are about.
      envoy: { messageTimeoutMs: 5000 },
    });
    gateways.push(g);
    return g;
  }

  it("the scraper reads vLLM 0.32's queue, batch and KV-cache gauges, learns its batch size from them, and new requests avoid the loaded server", async () => {
    const g = await gateway();
    const [loaded] = servers;
    const load = new AbortController();
    // Ten long generations straight at one server: four run, six wait (--max-num-seqs 4).
    const pending = Array.from({ length: 10 }, (_, i) =>
      loaded
        .post('/v1/completions', { model: VLLM_MODEL, prompt: `load ${i}`, max_tokens: 900, ignore_eos: true, temperature: 0 }, load.signal)
        .catch(() => undefined),
    );
    try {
      const seen = await waitUntil(
        async () => {
          const l = await debugLoad(g, loaded.address);
          return l?.metrics === 'fresh' && (l.waiting ?? 0) >= 1 && (l.running ?? 0) === 4 ? l : undefined;
        },
        { description: 'llm-extproc to read the loaded server as 4 running and some waiting', timeoutMs: 60_000, intervalMs: 50 },
      );
      assert.ok((seen.kvCacheUsage ?? 0) > 0, `KV-cache use read as ${seen.kvCacheUsage}`);
      // The batch size is learnt from the gauges alone (running while some wait): vLLM's
      // --max-num-seqs, which the picker never reads from a flag. It can be first read low, from a
      // step that had not yet taken the whole batch in, and only rises, to the real figure.
      const learnt = await waitUntil(
        async () => {
          const l = await debugLoad(g, loaded.address);
          return l?.batchLimit === 4 ? l : undefined;
        },
        { description: "llm-extproc to learn the loaded server's batch size (4) from its gauges", timeoutMs: 30_000, intervalMs: 50 },
      );
      assert.equal(learnt.batchLimit, 4);
      const before = attemptsBy(await g.metricsText(), servers);
      for (let i = 0; i < 12; i++) {
        const response = await g.send(post(chat([{ role: 'user', content: `short question ${i}` }])));
        assert.equal(response.status, 200, response.text());
      }
      const got = attemptsBy(await g.metricsText(), servers).map((n, i) => n - before[i]);
      assert.equal(got[0], 0, `the loaded server took ${got[0]} of 12 new requests: ${JSON.stringify(got)}`);
      assert.equal(got[1] + got[2], 12);
      // The idle servers' reports are read as idle, not as missing.
      for (const idle of servers.slice(1)) {
        const l = await debugLoad(g, idle.address);
        assert.equal(l?.metrics, 'fresh');
        assert.equal(l?.waiting, 0);
        // A server that never queued has shown no limit: unknown, which counts as room.
        assert.equal(l?.batchLimit, undefined);
      }
    } finally {
      load.abort();
      await Promise.all(pending);
    }
    // vLLM aborts the requests whose client hung up; the scraper sees the server idle again.
    await waitUntil(
      async () => {
        const l = await debugLoad(g, loaded.address);
        return l?.metrics === 'fresh' && l.waiting === 0 && l.running === 0 ? true : undefined;
      },
      { description: 'the loaded server read as idle after its load was cancelled', timeoutMs: 60_000 },
    );
  });

  it('a stream with the usage chunk passes through whole: the same text as a direct answer, usage counted from it', async () => {
    const g = await gateway();
    const messages = [{ role: 'user', content: 'Explain the invoice for order 4417 in two sentences.' }];
    const direct = JSON.parse((await servers[0].post('/v1/chat/completions', chat(messages))).body) as {
      choices: Array<{ message: { content: string } }>;
      usage: { prompt_tokens: number; completion_tokens: number };
    };
    const response = await g.send(post(chat(messages, { stream: true, stream_options: { include_usage: true } })));
    assert.equal(response.status, 200, response.text());
    assert.match(response.headers['content-type'] ?? '', /^text\/event-stream/);
    const streamed = streamedText(response.text());
    assert.equal(streamed.text, direct.choices[0].message.content, 'temperature 0: the same tokens through the gateway');
    assert.ok(streamed.done, 'the stream ends with [DONE]');
    assert.deepEqual(streamed.finish, ['length']);
    assert.equal(streamed.usage?.['prompt_tokens'], direct.usage.prompt_tokens);
    assert.equal(streamed.usage?.['completion_tokens'], direct.usage.completion_tokens);
    await waitUntil(
      async () => {
        const text = await g.metricsText();
        return metricValue(text, 'llm_extproc_tokens_total', { type: 'output' }) === direct.usage.completion_tokens &&
          metricValue(text, 'llm_extproc_tokens_total', { type: 'input' }) === direct.usage.prompt_tokens
          ? true
          : undefined;
      },
      { description: "llm-extproc to count the stream's tokens as vLLM reported them" },
    );
    assert.equal(metricValue(await g.metricsText(), 'llm_extproc_requests_total', { result: 'ok' }), 1);
  });

  it('usage injection (routing.streamUsagePools): tokens counted from vLLM, the usage chunk never reaches the client', async () => {
    const g = await gateway(`${pickerYaml()}\nrouting:\n  streamUsagePools: [${POOL}]\n`);
    const messages = [{ role: 'user', content: 'Summarise the refund policy for a customer.' }];
    const direct = JSON.parse((await servers[1].post('/v1/chat/completions', chat(messages))).body) as {
      choices: Array<{ message: { content: string } }>;
      usage: { prompt_tokens: number; completion_tokens: number };
    };
    for (const path of ['/v1/chat/completions', '/v1/completions'] as const) {
      const body =
        path === '/v1/chat/completions'
          ? chat(messages, { stream: true })
          : { model: VLLM_MODEL, prompt: 'Refund policy:', max_tokens: 5, temperature: 0, ignore_eos: true, stream: true };
      const response = await g.send(post(body, path));
      assert.equal(response.status, 200, response.text());
      const streamed = streamedText(response.text());
      assert.equal(streamed.usage, undefined, `${path}: the client did not ask for usage and gets none`);
      assert.ok(streamed.done, `${path}: [DONE] still ends the stream`);
      assert.ok(!response.text().includes('"usage"'), `${path}: no usage chunk at all`);
      if (path === '/v1/chat/completions') assert.equal(streamed.text, direct.choices[0].message.content);
      // vLLM moved system_fingerprint to the usage chunk we asked for; the client's last chunk has it back.
      const asked = (await servers[1].post(path, body)).body;
      const fingerprinted = (text: string): string[] =>
        sseEvents(text).flatMap((e) =>
          e.data !== '[DONE]' && e.data.includes('"system_fingerprint"') ? [e.data.includes('"finish_reason":"') ? 'finish' : 'other'] : [],
        );
      assert.deepEqual(fingerprinted(response.text()), fingerprinted(asked));
      assert.deepEqual(fingerprinted(asked), ['finish']);
    }
    await waitUntil(
      async () => {
        const text = await g.metricsText();
        return metricValue(text, 'llm_extproc_tokens_total', { type: 'output' }) === direct.usage.completion_tokens + 5 ? true : undefined;
      },
      { description: 'output tokens of both streams counted from the usage vLLM sent us' },
    );
    const text = await g.metricsText();
    assert.equal(metricValue(text, 'llm_extproc_answers_without_usage_total'), 0);
  });

  it('the Responses API, plain and streamed: answered, its terminal event recognised (vLLM ends a cut-short answer with response.completed)', async () => {
    const g = await gateway();
    const plain = await g.send(post({ model: VLLM_MODEL, input: 'Say hello.', max_output_tokens: 4, temperature: 0 }, '/v1/responses'));
    assert.equal(plain.status, 200, plain.text());
    const json = plain.json() as { object: string; status: string; usage: { output_tokens: number } };
    assert.equal(json.object, 'response');
    assert.equal(json.usage.output_tokens, 4);
    const streamed = await g.send(
      post({ model: VLLM_MODEL, input: 'Say hello.', max_output_tokens: 4, temperature: 0, stream: true }, '/v1/responses'),
    );
    assert.equal(streamed.status, 200, streamed.text());
    const events = sseEvents(streamed.text());
    assert.equal(events[0]?.event, 'response.created');
    const last = events.at(-1);
    assert.equal(last?.event, 'response.completed');
    // vLLM 0.32 marks the length cut in the object, not with a `response.incomplete` event.
    assert.equal((JSON.parse(last?.data ?? '{}') as { response: { status: string } }).response.status, 'incomplete');
    assert.ok(!streamed.text().includes('[DONE]'), 'the Responses API has no [DONE]');
    await waitUntil(
      async () => (metricValue(await g.metricsText(), 'llm_extproc_requests_total', { result: 'ok' }) === 2 ? true : undefined),
      { description: 'both Responses requests recorded as ok, the stream not as broken' },
    );
    const text = await g.metricsText();
    assert.equal(metricValue(text, 'llm_extproc_tokens_total', { type: 'output' }), 8);
  });

  it("vLLM's own errors reach the client as vLLM wrote them, and a client's mistake never counts against a server", async () => {
    // The pool claims a model its servers do not serve: llm-extproc routes it, vLLM refuses it.
    const g = await gateway(pickerYaml(), [VLLM_MODEL, 'ghost-model']);
    const direct = await servers[0].post('/v1/chat/completions', { model: 'ghost-model', messages: [{ role: 'user', content: 'hi' }] });
    const cases: Array<{ body: Record<string, unknown>; status: number; type: string; param: string; message: RegExp }> = [
      {
        body: { model: 'ghost-model', messages: [{ role: 'user', content: 'hi' }] },
        status: 404,
        type: 'NotFoundError',
        param: 'model',
        message: /^The model `ghost-model` does not exist/,
      },
      {
        body: chat([{ role: 'user', content: 'invoice '.repeat(1500) }]),
        status: 400,
        type: 'BadRequestError',
        param: 'input_tokens',
        message: /maximum context length is 1024 tokens/,
      },
      {
        body: chat([{ role: 'user', content: 'hi' }], { max_tokens: 5000, stream: true }),
        status: 400,
        type: 'BadRequestError',
        param: 'max_tokens',
        message: /^max_tokens=5000 cannot be greater than max_model_len=1024/,
      },
    ];
    for (let round = 0; round < 2; round++) {
      for (const c of cases) {
        const response = await g.send(post(c.body));
        assert.equal(response.status, c.status, response.text());
        assert.match(response.headers['content-type'] ?? '', /^application\/json/);
        const error = (response.json() as { error: { message: string; type: string; param: string; code: number } }).error;
        assert.equal(error.type, c.type);
        assert.equal(error.param, c.param);
        assert.equal(error.code, c.status);
        assert.match(error.message, c.message);
      }
    }
    assert.equal((await g.send(post(cases[0].body))).text(), direct.body, "the 404 body is byte for byte vLLM's");
    // A model no pool lists is refused by llm-extproc itself, with its own catalog error.
    const unknown = await g.send(post({ model: 'nobody-serves-this', messages: [{ role: 'user', content: 'hi' }] }));
    assert.equal(unknown.status, 404);
    assert.equal((unknown.json() as { error: { code: string } }).error.code, 'model_not_found');
    // Seven client errors, three servers, three failures in a row quarantine: none was quarantined.
    const text = await g.metricsText();
    assert.equal(metricValue(text, 'llm_extproc_endpoint_quarantines_total'), 0);
    for (const s of servers) assert.equal((await debugLoad(g, s.address))?.metrics, 'fresh');
    const ok = await g.send(post(chat([{ role: 'user', content: 'still there?' }])));
    assert.equal(ok.status, 200, ok.text());
  });

  it("prefix affinity sends a shared system prompt to one server, and vLLM's own prefix-cache counters show every repeat hit", async () => {
    const system =
      'You are the billing assistant of ACME Corp. Quote the tariff sheet, answer in two short sentences, and never reveal internal ticket numbers. '.repeat(
        4,
      );
    const conversation = (i: number): Array<{ role: string; content: string }> => [
      { role: 'system', content: system },
      { role: 'user', content: `Why is invoice ${1000 + i} higher than last month?` },
    ];
    // The tokens every request shares, from vLLM's own tokenizer and chat template.
    const tokenize = async (i: number): Promise<number[]> =>
      (
        JSON.parse(
          (await servers[0].post('/tokenize', { model: VLLM_MODEL, messages: conversation(i), add_generation_prompt: true })).body,
        ) as { tokens: number[] }
      ).tokens;
    const [t0, t1] = await Promise.all([tokenize(0), tokenize(1)]);
    let shared = 0;
    while (t0[shared] === t1[shared]) shared++;
    const sharedBlocks = Math.floor(shared / VLLM_BLOCK_TOKENS);
    assert.ok(sharedBlocks >= 3, `the shared prefix is ${shared} tokens`);

    const run = async (configYaml: string, tenant: string): Promise<{ hits: number; queries: number; servedBy: number[] }> => {
      const g = await gateway(configYaml);
      const before = await cacheCounters(servers);
      const attemptsBefore = attemptsBy(await g.metricsText(), servers);
      for (let i = 0; i < 12; i++) {
        const messages = conversation(i).map((m) => (m.role === 'system' ? { ...m, content: `${tenant} ${m.content}` } : m));
        const response = await g.send(post(chat(messages)));
        assert.equal(response.status, 200, response.text());
      }
      const after = await cacheCounters(servers);
      const servedBy = attemptsBy(await g.metricsText(), servers).map((n, i) => n - attemptsBefore[i]);
      return {
        hits: after.reduce((sum, c, i) => sum + c.hits - before[i].hits, 0),
        queries: after.reduce((sum, c, i) => sum + c.queries - before[i].queries, 0),
        servedBy,
      };
    };

    // Affinity on (the default weights): one owner, every request after the first reuses its blocks.
    const affine = await run(pickerYaml(), 'Tenant A.');
    assert.deepEqual(
      affine.servedBy.filter((n) => n > 0),
      [12],
      `one server takes the tenant: ${JSON.stringify(affine.servedBy)}`,
    );
    // "Tenant A." adds a few tokens to the shared part; whole blocks only, so at least the blocks counted above.
    assert.ok(affine.hits >= 11 * sharedBlocks * VLLM_BLOCK_TOKENS, `hits ${affine.hits} for 11 repeats of ${sharedBlocks} blocks`);
    // Affinity off: the same workload spread by load pays the first request's misses on every server it reaches.
    const spread = await run(pickerYaml('  weights: { prefix: 0 }'), 'Tenant B.');
    assert.ok(spread.servedBy.filter((n) => n > 0).length >= 2, `without affinity the requests spread: ${JSON.stringify(spread.servedBy)}`);
    const ratio = (r: { hits: number; queries: number }): number => r.hits / r.queries;
    assert.ok(
      ratio(affine) > ratio(spread),
      `vLLM's hit ratio with affinity ${ratio(affine).toFixed(3)} > without ${ratio(spread).toFixed(3)}`,
    );
  });

  it('vLLM publishes its prefix cache as KV events: full blocks with their token ids, chained hashes, evictions', async () => {
    const server = servers[2];
    const sources = JSON.parse((await server.get('/kv_event_sources')).body) as Record<
      string,
      { endpoint: string; topic: string; publisher: string }
    >;
    assert.equal(sources['0']?.publisher, 'zmq');
    assert.equal(sources['0']?.topic, server.kvEventsTopic);
    const config = await server.metricsText();
    assert.match(config, /vllm:cache_config_info\{[^}]*block_size="32"/);
    assert.match(config, /vllm:cache_config_info\{[^}]*num_gpu_blocks="256"/);
    assert.match(config, /vllm:cache_config_info\{[^}]*prefix_caching_hash_algo="sha256"/);

    const subscriber = await KvEventSubscriber.connect(server.kvEventsEndpoint, server.kvEventsTopic);
    try {
      const system = 'You are the support assistant of ACME Corp. Follow the handbook and answer in two sentences. '.repeat(3);
      const conversation = [
        { role: 'system', content: system },
        { role: 'user', content: 'Where is my parcel?' },
      ];
      const tokens = (
        JSON.parse((await server.post('/tokenize', { model: VLLM_MODEL, messages: conversation, add_generation_prompt: true })).body) as {
          tokens: number[];
        }
      ).tokens;
      const full = Math.floor(tokens.length / VLLM_BLOCK_TOKENS);
      assert.equal((await server.post('/v1/chat/completions', chat(conversation, { max_tokens: 1 }))).status, 200);
      const stored = await subscriber.waitFor(
        (events) => events.find((e): e is Extract<KvEvent, { type: 'BlockStored' }> => e.type === 'BlockStored'),
        'a BlockStored event for the first request',
      );
      // One event for the prompt's full blocks: their tokens are /tokenize's (chat template applied), in order.
      assert.equal(stored.parentBlockHash, null);
      assert.equal(stored.blockSize, VLLM_BLOCK_TOKENS);
      assert.equal(stored.blockHashes.length, full);
      assert.deepEqual(stored.tokenIds, tokens.slice(0, full * VLLM_BLOCK_TOKENS));
      assert.equal(stored.medium, 'GPU');

      // The same conversation one turn longer: only its new full blocks are stored, chained to the last cached one.
      const longer = [
        ...conversation,
        { role: 'assistant', content: 'It left our warehouse yesterday.' },
        { role: 'user', content: 'When will it arrive at my office in Lisbon, and who will deliver it?' },
      ];
      const longerTokens = (
        JSON.parse((await server.post('/tokenize', { model: VLLM_MODEL, messages: longer, add_generation_prompt: true })).body) as {
          tokens: number[];
        }
      ).tokens;
      assert.deepEqual(longerTokens.slice(0, full * VLLM_BLOCK_TOKENS), stored.tokenIds, 'the longer prompt starts with the cached blocks');
      subscriber.batches.length = 0;
      assert.equal((await server.post('/v1/chat/completions', chat(longer, { max_tokens: 1 }))).status, 200);
      const extension = await subscriber.waitFor(
        (events) => events.find((e): e is Extract<KvEvent, { type: 'BlockStored' }> => e.type === 'BlockStored'),
        'a BlockStored event for the longer prompt',
      );
      assert.equal(extension.parentBlockHash, stored.blockHashes.at(-1));
      assert.deepEqual(
        extension.tokenIds,
        longerTokens.slice(full * VLLM_BLOCK_TOKENS, (full + extension.blockHashes.length) * VLLM_BLOCK_TOKENS),
      );

      // Prompts of about 28 blocks each until the 256-block cache evicts a block this subscriber saw
      // stored (blocks of earlier tests, older, go first): BlockRemoved names it by the same hash.
      const storedHashes = new Set([...stored.blockHashes, ...extension.blockHashes]);
      const removedSeen = (): bigint[] =>
        subscriber.events().flatMap((e) => (e.type === 'BlockRemoved' ? e.blockHashes.filter((h) => storedHashes.has(h)) : []));
      for (let i = 0; i < 16 && removedSeen().length === 0; i++) {
        const prompt = Array.from({ length: 300 }, (_, j) => `w${(i * 7919 + j * 104729) % 99991}`).join(' ');
        const res = await server.post('/v1/completions', { model: VLLM_MODEL, prompt, max_tokens: 1 });
        assert.equal(res.status, 200, res.body);
        await subscriber.waitFor(
          (events) => (events.some((e) => e.type === 'BlockStored' && !e.blockHashes.every((h) => storedHashes.has(h))) ? true : undefined),
          `the blocks of flood prompt ${i}`,
        );
        for (const e of subscriber.events()) if (e.type === 'BlockStored') for (const h of e.blockHashes) storedHashes.add(h);
      }
      assert.ok(removedSeen().length > 0, 'the cache evicted blocks it had announced');
      // Sequence numbers count batches without gaps.
      const seqs = subscriber.batches.map((b) => b.seq);
      assert.deepEqual(
        seqs,
        seqs.map((_, i) => seqs[0] + BigInt(i)),
      );
      assert.deepEqual(subscriber.rejected, []);
    } finally {
      await subscriber.close();
    }
  });
});
