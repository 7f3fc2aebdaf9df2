// The scenarios every gateway suite runs, written once: behind each gateway profile through a real
// Envoy (e2e/gateways.test.ts), and behind the live controllers, Envoy Gateway and Istio
// (e2e/live-envoy-gateway.test.ts, live-istio.test.ts). A suite hands over its bed (how to send,
// where the metrics are, which model answers how) and what its gateway does differently (a body
// its buffer limit refuses, an answer Envoy holds whole); each cell asserts what a user of that
// gateway sees, and what llm-extproc records about each replica.

import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { it } from 'node:test';
import { assertAppendedErrorEvent, assertCatalogError } from './catalog-assert.js';
import type { ClientRequest, ClientResponse } from './http-client.js';
import type { Behavior, ModelServer } from './model-server.js';
import { metricValue } from './prometheus.js';
import { assertSameBytes, sequencedText } from './sequenced-bytes.js';
import { waitUntil } from './wait-until.js';

const CHAT = '/v1/chat/completions';

/** How a model's replicas answer, for one scenario. */
export type Arrangement =
  | 'refuse'
  | 'close-before-headers'
  | 'hang'
  | 'truncated-json'
  | 'sse-no-terminator'
  /** Two SSE events, then nothing until the scenario resets the connection. */
  | 'reset-after-two-events'
  /** 64 SSE events of random content, at once (small ones: see behaviorFor). */
  | 'sixty-four-events'
  /** An SSE stream of random content paced over this many seconds. */
  | { readonly pacedSeconds: number };

/** What a model server does to answer as `arrangement` says: a behaviour, or refusing connections. */
export function behaviorFor(arrangement: Arrangement): Behavior | 'refuse' {
  if (typeof arrangement === 'object') {
    return { kind: 'paced-random-sse', events: arrangement.pacedSeconds * 2, gapMs: 500, bytesPerEvent: 768 };
  }
  switch (arrangement) {
    case 'refuse':
      return 'refuse';
    case 'close-before-headers':
    case 'hang':
    case 'truncated-json':
    case 'sse-no-terminator':
      return { kind: arrangement };
    case 'reset-after-two-events':
      return { kind: 'hang-after-headers', afterEvents: 2 };
    case 'sixty-four-events':
      // About 18 KiB in all: within the 32 KiB a gateway holding the answer whole (aigw-buffered) buffers.
      return { kind: 'paced-random-sse', events: 64, gapMs: 0, bytesPerEvent: 96 };
  }
}

/** A model arranged to answer one way. */
export interface Arranged {
  readonly model: string;
  /** The replicas that may answer it. */
  readonly servers: readonly ModelServer[];
  /** Puts back what the arrangement changed (a no-op for a pool kept for it). */
  restore(): Promise<void>;
}

/** The model's `servers` made to answer as `arrangement` says, until restore() (back to `ok`). */
export async function arrangeServers(model: string, servers: readonly ModelServer[], arrangement: Arrangement): Promise<Arranged> {
  const behavior = behaviorFor(arrangement);
  if (behavior === 'refuse') {
    await Promise.all(servers.map((s) => s.refuse()));
    return { model, servers, restore: async () => void (await Promise.all(servers.map((s) => s.resume()))) };
  }
  for (const s of servers) s.setBehavior(behavior);
  return {
    model,
    servers,
    restore: () => {
      for (const s of servers) s.setBehavior({ kind: 'ok' });
      return Promise.resolve();
    },
  };
}

type FixedArrangement = Exclude<Arrangement, { readonly pacedSeconds: number }>;

/** A pool kept for one arrangement: its model, and its replicas' ids. */
export interface ArrangedPool {
  readonly model: string;
  readonly replicas: readonly string[];
}

/** For a bed that keeps a pool per arrangement (its replicas answer that way from the start). */
export const ARRANGED_POOLS: { readonly [A in FixedArrangement]: ArrangedPool } = {
  refuse: { model: 'refuse', replicas: ['refuse-a'] },
  'close-before-headers': { model: 'close', replicas: ['close-a'] },
  hang: { model: 'hang', replicas: ['hang-a'] },
  'truncated-json': { model: 'truncated', replicas: ['truncated-a'] },
  'sse-no-terminator': { model: 'no-terminator', replicas: ['no-terminator-a'] },
  'reset-after-two-events': { model: 'reset', replicas: ['reset-a', 'reset-b'] },
  'sixty-four-events': { model: 'sse64', replicas: ['sse64-a', 'sse64-b'] },
};

/** The pool kept for streams paced over `seconds`. */
export function pacedPool(seconds: number): ArrangedPool {
  return { model: `long-${seconds}`, replicas: [`long-${seconds}-a`] };
}

/** Every pool kept for an arrangement, each with the behaviour its replicas start with (refusing ones start `ok`: refuse after the gateway is up). */
export function arrangedPools(longStreamSeconds: readonly number[] = []): Array<ArrangedPool & { readonly behavior: Behavior }> {
  const fixed = Object.entries(ARRANGED_POOLS).map(([arrangement, pool]) => {
    const behavior = behaviorFor(arrangement as FixedArrangement);
    return { ...pool, behavior: behavior === 'refuse' ? ({ kind: 'ok' } as const) : behavior };
  });
  return [
    ...fixed,
    ...longStreamSeconds.map((seconds) => ({ ...pacedPool(seconds), behavior: behaviorFor({ pacedSeconds: seconds }) as Behavior })),
  ];
}

/** `arrange` for such a bed: the pool kept for the arrangement, as it is. */
export function fromArrangedPools(server: (id: string) => ModelServer): ScenarioBed['arrange'] {
  return (arrangement) => {
    const pool = typeof arrangement === 'object' ? pacedPool(arrangement.pacedSeconds) : ARRANGED_POOLS[arrangement];
    return Promise.resolve({ model: pool.model, servers: pool.replicas.map(server), restore: () => Promise.resolve() });
  };
}

/** A gateway with llm-extproc behind it, as the scenarios drive it. */
export interface ScenarioBed {
  send(request: ClientRequest): Promise<ClientResponse>;
  /** llm-extproc's Prometheus text (summed over its replicas where there are several). */
  metricsText(): Promise<string>;
  /** The model most scenarios ask for: replicas that answer `ok`, and one that is not ready (never picked). */
  readonly chat: { readonly model: string; readonly ready: readonly ModelServer[]; readonly notReady?: ModelServer };
  /** Another model, in a pool of its own. */
  readonly other?: { readonly model: string; readonly server: ModelServer };
  /** A model whose replicas answer as `arrangement` says. */
  arrange(arrangement: Arrangement): Promise<Arranged>;
  /** The state llm-extproc shows an endpoint in (/debug/endpoints), where the bed serves it. */
  readonly endpointState?: (address: string) => Promise<string | undefined>;
}

/** What the gateway under test does differently from the others (docs/gateways.md explains each). */
export interface GatewayTraits {
  /** A model of the bed whose pool has no ready replica (answered 503 no_ready_replica). */
  readonly startingModel?: string;
  /** Request bodies of these sizes pass byte-identical, or the gateway's buffer limit answers 413 body_too_large. */
  readonly bodies: { readonly bytes: readonly number[]; readonly outcome: 'identical' | 'body_too_large' };
  /** SSE streams lasting this many seconds pass whole (no route timeout cuts them). */
  readonly longStreamSeconds?: readonly number[];
  /**
   * llm-extproc learns which replica reset before answering (Envoy's `upstream.address`, or the
   * only address it handed over), and so checks that replica at once. Behind Istio, whose retries
   * walk our list and whose final reply carries neither, it cannot.
   */
  readonly resetBlamed: boolean;
  /** The route times out within seconds: a hung model server gets 504 upstream_timeout JSON. */
  readonly routeTimesOut?: boolean;
  /**
   * A response body held whole by Envoy (BUFFERED) never reaches the client in part: a reset
   * half-way becomes a failed response instead of a stream broken after bytes went out.
   */
  readonly responseHeld?: boolean;
}

function chat(model: string, extra: Record<string, unknown> = {}): ClientRequest {
  return { path: CHAT, body: { model, messages: [{ role: 'user', content: 'hi there' }], ...extra } };
}

const digest = (bytes: Buffer): string => createHash('sha256').update(bytes).digest('hex');

/** The model server that answered, from its id header. */
function servedBy(servers: readonly ModelServer[], response: ClientResponse): ModelServer {
  const id = response.headers['x-model-server-id'];
  const server = servers.find((s) => s.id === id);
  assert.ok(server !== undefined, `answered by ${id ?? 'no model server'}, not one of ${servers.map((s) => s.id).join(', ')}`);
  return server;
}

/** A counter's growth between two scrapes. */
function grew(before: string, after: string, name: string, labels: Readonly<Record<string, string>> = {}): number {
  return metricValue(after, name, labels) - metricValue(before, name, labels);
}

/** Registers the scenarios (node:test cells) in the caller's describe; `bed` is read when they run. */
export function gatewayScenarios(bed: () => ScenarioBed, traits: GatewayTraits): void {
  /** Runs `cell` with a model arranged as asked, and puts it back after. */
  async function arranged(arrangement: Arrangement, cell: (arranged: Arranged) => Promise<void>): Promise<void> {
    const a = await bed().arrange(arrangement);
    try {
      await cell(a);
    } finally {
      await a.restore();
    }
  }

  void it('routes each model to ready endpoints of its own pool only, never to the not-ready one', async () => {
    const { chat: main, other } = bed();
    const before = await bed().metricsText();
    for (let i = 0; i < 10; i++) {
      const response = await bed().send(chat(main.model, { messages: [{ role: 'user', content: `hello ${i}` }] }));
      assert.equal(response.status, 200, response.text());
      servedBy(main.ready, response);
      if (other === undefined) continue;
      const elsewhere = await bed().send(chat(other.model));
      assert.equal(elsewhere.status, 200, elsewhere.text());
      assert.equal(elsewhere.headers['x-model-server-id'], other.server.id);
    }
    assert.equal(main.notReady?.requests.length ?? 0, 0, 'the not-ready endpoint never gets a request');
    if (other !== undefined) {
      assert.ok(other.server.requests.every((r) => (JSON.parse(r.body.toString()) as { model: string }).model === other.model));
    }
    const answered = other === undefined ? 10 : 20;
    await waitUntil(
      async () =>
        grew(before, await bed().metricsText(), 'llm_extproc_upstream_attempts_total', { outcome: 'success' }) >= answered
          ? true
          : undefined,
      { description: 'every answer recorded by llm-extproc as a success of the replica that gave it' },
    );
  });

  void it('passes a JSON request and answer byte-identical', async () => {
    const { chat: main } = bed();
    const body = Buffer.from(`{"model":"${main.model}",  "messages":[{"role":"user","content":"héllo ✓"}],"temperature":0.5}`);
    const response = await bed().send({ path: CHAT, body });
    assert.equal(response.status, 200, response.text());
    const served = servedBy(main.ready, response).requests.at(-1)!;
    assert.deepEqual(served.body, body, 'the request body reaches the model server unchanged');
    assert.deepEqual(response.body, served.response.body, 'the answer reaches the client unchanged');
  });

  void it('passes an SSE stream byte-identical', async () => {
    const { chat: main } = bed();
    const response = await bed().send(chat(main.model, { stream: true }));
    assert.equal(response.status, 200, response.text());
    const served = servedBy(main.ready, response).requests.at(-1)!;
    await served.response.settled;
    assert.deepEqual(response.body, served.response.body);
    assert.match(response.text(), /data: \[DONE\]\n\n$/);
  });

  void it('passes a 64-event SSE stream of random content byte-identical', async () => {
    await arranged('sixty-four-events', async ({ model, servers }) => {
      const response = await bed().send(chat(model, { stream: true }));
      assert.equal(response.status, 200, response.text());
      const served = servedBy(servers, response).requests.at(-1)!;
      assert.equal(await served.response.settled, 'ended');
      assert.equal(digest(response.body), digest(served.response.body));
      assert.equal(response.text().match(/^data: /gm)?.length, 65, '64 events and the terminator');
      assert.match(response.text(), /data: \[DONE\]\n\n$/);
    });
  });

  for (const bytes of traits.bodies.bytes) {
    const size = `${bytes / (1024 * 1024)} MiB`;
    const identical = traits.bodies.outcome === 'identical';
    void it(
      identical
        ? `delivers a ${size} request body byte-identical`
        : `answers a ${size} request body with 413 body_too_large JSON (gateway buffer limit)`,
      async () => {
        const { chat: main } = bed();
        // Every 16 bytes name their own offset: a chunk lost, repeated or moved changes the bytes.
        const body = Buffer.from(
          JSON.stringify({ model: main.model, messages: [{ role: 'user', content: 'big' }], pad: sequencedText(bytes) }),
        );
        const reached = (): number => main.ready.reduce((n, s) => n + s.requests.length, 0);
        const before = reached();
        const response = await bed().send({ path: CHAT, body, timeoutMs: 60_000 });
        if (identical) {
          assert.equal(response.status, 200, response.text().slice(0, 500));
          const served = servedBy(main.ready, response).requests.at(-1)!;
          assertSameBytes(served.body, body, `the ${size} body the model server got`);
          assert.deepEqual(response.body, served.response.body, 'the answer reaches the client unchanged');
        } else {
          assertCatalogError(response, 'body_too_large');
          assert.equal(reached(), before, 'nothing reached a model server');
        }
      },
    );
  }

  for (const seconds of traits.longStreamSeconds ?? []) {
    void it(`passes a ${seconds} s SSE stream of random content byte-identical`, { timeout: (seconds + 60) * 1000 }, async () => {
      await arranged({ pacedSeconds: seconds }, async ({ model, servers }) => {
        // The model server paces its own chunks; the test only waits for the end.
        const started = Date.now();
        const response = await bed().send({ ...chat(model, { stream: true }), timeoutMs: (seconds + 30) * 1000 });
        const elapsed = Date.now() - started;
        assert.equal(response.status, 200, response.text().slice(0, 300));
        assert.equal(response.error, undefined, `the stream was cut after ${elapsed} ms`);
        const served = servedBy(servers, response).requests.at(-1)!;
        assert.equal(await served.response.settled, 'ended');
        assert.equal(digest(response.body), digest(served.response.body));
        assert.match(response.text(), /data: \[DONE\]\n\n$/);
        assert.ok(elapsed >= seconds * 1000 - 1000, `the stream really lasted ${elapsed} ms`);
      });
    });
  }

  void it('answers an unknown model with 404 model_not_found JSON', async () => {
    const body = assertCatalogError(await bed().send(chat('gpt-17')), 'model_not_found');
    assert.match(body.error.message, /gpt-17/);
  });

  void it('answers a broken JSON body with 400 invalid_json JSON', async () => {
    assertCatalogError(await bed().send({ path: CHAT, body: `{"model": "${bed().chat.model}", "messages": [` }), 'invalid_json');
  });

  const starting = traits.startingModel;
  if (starting !== undefined) {
    void it('answers a model without a ready replica with 503 no_ready_replica JSON', async () => {
      const response = await bed().send(chat(starting));
      assertCatalogError(response, 'no_ready_replica');
      assert.match(response.headers['retry-after'] ?? '', /^\d+$/);
    });
  }

  void it('explains connections refused by every replica as JSON', async () => {
    await arranged('refuse', async ({ model }) => {
      assertCatalogError(await bed().send(chat(model)), 'upstream_connect_failed', 'all_replicas_failed');
    });
  });

  void it(`explains a reset before response headers as JSON${traits.resetBlamed ? '; the replica passes its check and stays Ready' : ''}`, async () => {
    await arranged('close-before-headers', async ({ model, servers }) => {
      const before = await bed().metricsText();
      assertCatalogError(await bed().send(chat(model)), 'upstream_reset');
      if (!traits.resetBlamed) return;
      await waitUntil(
        async () =>
          grew(before, await bed().metricsText(), 'llm_extproc_failed_connect_checks_total', { verdict: 'replica_alive' }) >= 1
            ? true
            : undefined,
        { description: 'the check after the reset' },
      );
      const shown = bed();
      if (shown.endpointState === undefined) return;
      for (const server of servers) assert.equal(await shown.endpointState(server.address), 'Ready');
    });
  });

  if (traits.routeTimesOut === true) {
    void it('explains a timeout as JSON', async () => {
      await arranged('hang', async ({ model }) => {
        assertCatalogError(await bed().send(chat(model)), 'upstream_timeout');
      });
    });
  }

  void it('turns a truncated JSON answer into a clean 502', async () => {
    await arranged('truncated-json', async ({ model }) => {
      assertCatalogError(await bed().send(chat(model)), 'truncated_response');
    });
  });

  void it('appends an SSE error event to a stream that ends without its terminator', async () => {
    await arranged('sse-no-terminator', async ({ model, servers }) => {
      const response = await bed().send(chat(model, { stream: true }));
      const served = servedBy(servers, response).requests.at(-1)!;
      await served.response.settled;
      assertAppendedErrorEvent(response, served.response.body, 'stream_incomplete');
    });
  });

  void it(
    traits.responseHeld === true
      ? 'a reset half-way through a held answer fails that request, counts as a failed attempt and is never retried'
      : 'records a stream reset half-way as a failed attempt and never retries it',
    async () => {
      await arranged('reset-after-two-events', async ({ model, servers }) => {
        const counts = servers.map((s) => s.requests.length);
        const metricsBefore = await bed().metricsText();
        let resetDone = false;
        const reset = (): void => {
          if (resetDone) return;
          resetDone = true;
          servers.forEach((s, i) => {
            if (s.requests.length > counts[i]) s.resetConnections();
          });
        };
        // Reset once bytes reached the client, or (answer held by Envoy) once the model server sent its first events.
        const sending = bed().send({ ...chat(model, { stream: true }), onData: reset });
        if (traits.responseHeld === true) {
          await waitUntil(() => (servers.some((s, i) => (s.requests[counts[i]]?.response.chunks.length ?? 0) >= 2) ? true : undefined), {
            description: 'the model server sending its first events',
          });
          reset();
        }
        const response = await sending;
        const tried = servers.filter((s, i) => s.requests.length > counts[i]);
        assert.equal(tried.length, 1, 'never retried onto another replica');
        const served = tried[0];
        assert.equal(served.requests.length, counts[servers.indexOf(served)] + 1, 'not retried on the same replica either');
        if (traits.responseHeld === true) {
          // Documented limitation (docs/gateways.md): Envoy's own 502 for the reset goes out after
          // ext_proc already answered this response's headers, so it never passes through us and
          // keeps Envoy's text unless the gateway maps it (Envoy Gateway responseOverride).
          assert.equal(response.status, 502, response.text());
          assert.match(response.text(), /^upstream connect error or disconnect\/reset before headers/);
          assert.ok(!response.text().includes('data:'), 'no part of the held stream went out');
        } else {
          assert.equal(response.status, 200);
          assert.ok(response.body.length > 0, 'the client had received part of the stream');
          assert.ok(response.error !== undefined, 'the client sees its response end before the body did');
          const sent = served.requests.at(-1)!.response.body;
          assertSameBytes(
            response.body,
            sent.subarray(0, response.body.length),
            'what the client got: a part of what the server sent, unchanged',
          );
        }
        const failures = { endpoint: served.address, outcome: 'failure' };
        await waitUntil(
          async () =>
            grew(metricsBefore, await bed().metricsText(), 'llm_extproc_upstream_attempts_total', failures) === 1 ? true : undefined,
          { description: 'the reset counted as a failure of the replica that served it' },
        );
        const metrics = await bed().metricsText();
        if (traits.responseHeld !== true) {
          assert.equal(grew(metricsBefore, metrics, 'llm_extproc_upstream_attempts_total', { ...failures, reason: 'stream_broken' }), 1);
        }
        assert.equal(
          grew(metricsBefore, metrics, 'llm_extproc_upstream_attempts_total', { endpoint: served.address, outcome: 'success' }),
          0,
        );
      });
    },
  );
}
