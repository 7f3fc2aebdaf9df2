// Picking policies measured on real vLLM by vLLM's own prefix-cache counters: three servers with
// caches small enough to evict, a workload of tenants with shared system prompts and multi-turn
// conversations beside short single-turn chats, sent through a real Envoy and 1 or 3 llm-extproc
// processes per policy. Shared by `npm run bench:cache` (which prints the table) and the real-vLLM
// test that asserts its ordering. Hits are counted by vLLM (tokens found cached / tokens asked),
// not timed, so the ordering holds on a busy machine; times to first token are the client's.

import { readFileSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { request as httpRequest } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stringify as toYaml } from 'yaml';
import { DEFAULT_GATEWAY_OPTIONS, renderGatewayConfig } from '../../tools/envoy-config/gateway-config.js';
import { startEnvoy } from './envoy-process.js';
import type { RunningEnvoy } from './envoy-process.js';
import { startExtprocProcess, withAllPickers } from './extproc-process.js';
import type { ExtprocProcess } from './extproc-process.js';
import { poolsYaml } from './gateway.js';
import { metricValue } from './prometheus.js';
import type { KvEventSubscriber } from './kv-events.js';
import { VLLM_BLOCK_TOKENS, VLLM_MODEL } from './vllm-server.js';
import type { VllmServer, VllmServerSpec } from './vllm-server.js';
import { waitUntil } from './wait-until.js';
import { prng } from '../../scripts/simulate/kernel.js';

export const CACHE_POLICIES = ['round-robin', 'least-in-flight', 'approximate', 'precise'] as const;
export type CachePolicy = (typeof CACHE_POLICIES)[number];

/** Blocks of KV cache per server by default: a few tenants' prompts and conversations, so caches evict. */
export const DEFAULT_CACHE_BLOCKS = 64;

/**
 * Bytes of KV cache one block of `VLLM_BLOCK_TOKENS` tokens takes in a float32 model (K and V per
 * layer, one vector per KV head), from its config.json: what `--kv-cache-memory-bytes` must be per
 * block wanted. The tiny model: 2 layers × 2 × 4 heads × 32 floats × 4 bytes × 32 tokens = 64 KiB.
 */
export function kvBytesPerBlock(modelDir: string): number {
  const config = JSON.parse(readFileSync(join(modelDir, 'config.json'), 'utf8')) as {
    num_hidden_layers: number;
    hidden_size: number;
    num_attention_heads: number;
    num_key_value_heads?: number;
  };
  const headDim = config.hidden_size / config.num_attention_heads;
  const kvHeads = config.num_key_value_heads ?? config.num_attention_heads;
  return 2 * config.num_hidden_layers * kvHeads * headDim * 4 * VLLM_BLOCK_TOKENS;
}

export interface CacheServerOptions {
  /** The model's directory (it must share the tiny model's tokenizer); default the tiny model. */
  readonly model?: string;
  /** KV-cache blocks per server (default `DEFAULT_CACHE_BLOCKS`). */
  readonly blocks?: number;
}

/** Servers for the bench: small caches (eviction), `POST /reset_prefix_cache` between runs. */
export function cacheServerSpecs(modelDir: string, count = 3, options: CacheServerOptions = {}): VllmServerSpec[] {
  const model = options.model ?? modelDir;
  const kvCacheBytes = (options.blocks ?? DEFAULT_CACHE_BLOCKS) * kvBytesPerBlock(model);
  return Array.from({ length: count }, (_, i) => ({ id: `cache-${i}`, kvCacheBytes, devMode: true, model }));
}

// ── the workload ────────────────────────────────────────────────────────────────────────────

export interface ChatMessage {
  readonly role: string;
  readonly content: string;
}

/** One conversation (turns sent one after another, each with the answers so far) or a short chat. */
export interface Session {
  readonly tenant: number;
  /** The system prompt, or none (short chats). */
  readonly system: string | undefined;
  /** The user's messages, one per turn. */
  readonly turns: readonly string[];
}

export interface WorkloadShape {
  readonly tenants: number;
  /** Sessions of tenants (their long system prompt, then `tenantTurns` questions). */
  readonly tenantSessions: number;
  readonly tenantTurns: number;
  /** Multi-turn conversations behind a one-line system prompt: their history is what they share. */
  readonly conversations: number;
  readonly conversationTurns: number;
  readonly shortChats: number;
  readonly seed: number;
}

export const DEFAULT_WORKLOAD: WorkloadShape = {
  tenants: 6,
  tenantSessions: 30,
  tenantTurns: 2,
  conversations: 24,
  conversationTurns: 5,
  shortChats: 60,
  seed: 31,
};

const WORDS = (
  'order invoice refund shipping parcel account password warranty battery screen keyboard printer ' +
  'delivery address payment card balance plan upgrade discount coupon store branch manager schedule ' +
  'meeting report summary budget forecast contract supplier customer ticket priority status'
).split(' ');

function sentence(rand: () => number, words: number): string {
  const out: string[] = [];
  for (let i = 0; i < words; i++) out.push(WORDS[Math.floor(rand() * WORDS.length)]);
  return `${out.join(' ')}.`;
}

/** A tenant's system prompt: about 600 tokens of the tiny model's tokenizer (18 blocks), its own from the first words. */
export function systemPrompt(tenant: number): string {
  const rand = prng(1000 + tenant);
  const lines = [`You are the assistant of company number ${tenant}.`];
  for (let i = 0; i < 14; i++) lines.push(`Rule ${i + 1} of company ${tenant}: ${sentence(rand, 9)}`);
  return lines.join(' ');
}

/** What every conversation without a tenant starts with: shorter than a block, it shares nothing by itself. */
const GENERIC_SYSTEM = 'You are a helpful assistant.';

/** The sessions of one run, in the order workers take them: tenants' sessions, conversations and short chats interleaved. */
export function workloadSessions(shape: WorkloadShape = DEFAULT_WORKLOAD): Session[] {
  const rand = prng(shape.seed);
  const question = (who: string, t: number): string => `Question ${t + 1} from ${who}: ${sentence(rand, 8)}`;
  const tenantSessions: Session[] = Array.from({ length: shape.tenantSessions }, (_, i) => ({
    tenant: i % shape.tenants,
    system: systemPrompt(i % shape.tenants),
    turns: Array.from({ length: shape.tenantTurns }, (_, t) => question(`customer ${i}`, t)),
  }));
  const conversations: Session[] = Array.from({ length: shape.conversations }, (_, i) => ({
    tenant: -1,
    system: GENERIC_SYSTEM,
    turns: Array.from({ length: shape.conversationTurns }, (_, t) => question(`user ${i}`, t)),
  }));
  const greetings = ['hi', 'hello there', 'thanks!', 'good morning', 'what time is it?', 'help'];
  const shorts: Session[] = Array.from({ length: shape.shortChats }, (_, i) => ({
    tenant: -1,
    system: undefined,
    turns: [greetings[i % greetings.length]],
  }));
  const queues = [tenantSessions, conversations, shorts];
  const out: Session[] = [];
  while (queues.some((q) => q.length > 0)) for (const q of queues) if (q.length > 0) out.push(q.shift() as Session);
  return out;
}

/** The messages of turn `turn` (0-based) given the answers to the earlier turns. */
export function turnMessages(session: Session, turn: number, answers: readonly string[]): ChatMessage[] {
  const messages: ChatMessage[] = session.system === undefined ? [] : [{ role: 'system', content: session.system }];
  for (let t = 0; t < turn; t++)
    messages.push({ role: 'user', content: session.turns[t] }, { role: 'assistant', content: answers[t] ?? '' });
  messages.push({ role: 'user', content: session.turns[turn] });
  return messages;
}

/**
 * `count` chat requests of the workload, each turn of each session with short answers as its
 * history; past one round, the first message is marked with the round so that every request is new
 * to a server's cache (the exactness test and the tokenizer measurement use them).
 */
export function chatRequests(count: number): ChatMessage[][] {
  const round: ChatMessage[][] = [];
  for (const session of workloadSessions()) {
    const answers = session.turns.map((_, t) => `answer ${t} with a few words`);
    for (let turn = 0; turn < session.turns.length; turn++) round.push(turnMessages(session, turn, answers));
  }
  return Array.from({ length: count }, (_, i) =>
    round[i % round.length].map((m, k) =>
      k === 0 && i >= round.length ? { ...m, content: `round ${Math.floor(i / round.length)}. ${m.content}` } : m,
    ),
  );
}

// ── one run ─────────────────────────────────────────────────────────────────────────────────

export interface CacheRun {
  readonly policy: CachePolicy;
  readonly processes: number;
  readonly requests: number;
  readonly failed: number;
  /** vLLM's own counters over the run, all servers: prefix-cache hit tokens / queried tokens. */
  readonly hitRatio: number;
  /** Per server, in the servers' order. */
  readonly serverHitRatios: readonly number[];
  /** Blocks the servers evicted during the run (BlockRemoved, from their KV events). */
  readonly evictions: number;
  readonly ttftP50Ms: number;
  readonly ttftP99Ms: number;
  readonly requestsPerSecond: number;
  readonly seconds: number;
  /**
   * With clients that ask for usage: the share of prompt tokens the answers report cached
   * (`prompt_tokens_details.cached_tokens`), for the tenants' sessions and for the conversations
   * apart (short chats hold no whole block). Undefined otherwise.
   */
  readonly classHitRatios: { readonly tenants: number; readonly conversations: number } | undefined;
}

/** llm-extproc's config for a policy (round-robin needs none: Envoy's own balancing). */
export function policyConfig(policy: CachePolicy, tokenizerDir: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
  const scraped = { metrics: { intervalSeconds: 0.1, timeoutSeconds: 2 } };
  // The tiny model's tokenizer makes about 2.8 characters per token of English text.
  const pool = { pools: { vllm: { blockTokens: VLLM_BLOCK_TOKENS, charsPerToken: 2.5 } } };
  const picker =
    policy === 'least-in-flight'
      ? { weights: { queue: 0, kvCache: 0, prefix: 0, lora: 0, latency: 0 }, metrics: { enabled: false } }
      : policy === 'approximate'
        ? { ...scraped, ...pool }
        : { ...scraped, ...pool, precise: { tokenizerDir, events: { discover: true } } };
  return { picker: { ...picker, ...extra } };
}

async function serverCounters(server: VllmServer): Promise<{ hits: number; queries: number }> {
  const text = await server.metricsText();
  const labels = { engine: '0', model_name: VLLM_MODEL };
  return {
    hits: metricValue(text, 'vllm:prefix_cache_hits_total', labels),
    queries: metricValue(text, 'vllm:prefix_cache_queries_total', labels),
  };
}

/**
 * Empties every server's prefix cache. vLLM queues AllBlocksCleared at the reset but publishes
 * events only with an engine step: a request shorter than one block (it stores nothing) sends it.
 */
async function resetCaches(servers: readonly VllmServer[]): Promise<void> {
  for (const server of servers) {
    const res = await server.post('/reset_prefix_cache', {});
    if (res.status !== 200)
      throw new Error(`POST /reset_prefix_cache on ${server.id}: HTTP ${res.status} ${res.body} (is VLLM_SERVER_DEV_MODE set?)`);
    const step = await server.post('/v1/completions', { model: VLLM_MODEL, prompt: 'flush', max_tokens: 1 });
    if (step.status !== 200) throw new Error(`a step after the reset on ${server.id}: HTTP ${step.status} ${step.body}`);
  }
}

/**
 * Empties the servers' caches until whoever follows their events trusts each one again. A reset's
 * AllBlocksCleared can be lost even by a subscriber that counts as subscribed: after the ZMTP
 * handshake, vLLM's PUB socket applies a new subscription asynchronously, and the reset's own
 * step stores no block, so no later event would move that subscriber on. Servers still untrusted
 * 2 s after their reset are reset again; after 30 s the wait fails naming them.
 */
export async function resetUntilTrusted(
  servers: readonly VllmServer[],
  untrustedOf: (servers: readonly VllmServer[]) => Promise<readonly VllmServer[]>,
  description: string,
): Promise<void> {
  const deadline = Date.now() + 30_000;
  let untrusted: readonly VllmServer[] = servers;
  while (untrusted.length > 0) {
    if (Date.now() >= deadline)
      throw new Error(`timed out after 30000 ms waiting for ${description}: ${untrusted.map((s) => s.id).join(', ')} still untrusted`);
    await resetCaches(untrusted);
    const resetAgainAt = Math.min(deadline, Date.now() + 2000);
    const reset = untrusted;
    untrusted = await waitUntil(
      async () => {
        const still = await untrustedOf(reset);
        return still.length === 0 ? still : undefined;
      },
      { description, timeoutMs: Math.max(0, resetAgainAt - Date.now()), intervalMs: 50 },
    ).catch(() => untrustedOf(reset));
  }
}

export interface FleetOptions {
  readonly policy: CachePolicy;
  readonly processes: number;
  readonly tokenizerDir: string;
  /** More picker settings (merged into `picker:`). */
  readonly picker?: Record<string, unknown>;
  /** The servers' pools (default: one pool `vllm` of all of them). */
  readonly pools?: ReadonlyArray<{ readonly name: string; readonly servers: readonly VllmServer[] }>;
  /** Node flags for every llm-extproc process (`--cpu-prof`: where a pick's time goes). */
  readonly nodeArgs?: readonly string[];
}

/** Envoy in front of the servers with `processes` llm-extproc processes (none for round-robin). */
export interface Fleet {
  readonly port: number;
  readonly pickers: readonly ExtprocProcess[];
  stop(): Promise<void>;
}

export async function startFleet(servers: readonly VllmServer[], options: FleetOptions): Promise<Fleet> {
  const dir = await mkdtemp(join(tmpdir(), 'llm-extproc-cache-'));
  const pickers: ExtprocProcess[] = [];
  let envoy: RunningEnvoy | undefined;
  const stop = async (): Promise<void> => {
    await envoy?.stop();
    // A profiled process writes its profile at a clean exit (SIGTERM; drain 0 s), not at SIGKILL.
    if ((options.nodeArgs ?? []).length > 0)
      await Promise.all(
        pickers.map(async (p) => {
          p.signal('SIGTERM');
          await p.exitWithin(30_000);
        }),
      );
    await Promise.all(pickers.map((p) => p.kill()));
    await rm(dir, { recursive: true, force: true });
  };
  try {
    const pools = options.pools ?? [{ name: 'vllm', servers }];
    const endpointsFile = join(dir, 'endpoints.yaml');
    await writeFile(
      endpointsFile,
      poolsYaml(pools.map((p) => ({ name: p.name, models: [VLLM_MODEL], endpoints: p.servers.map((s) => ({ address: s.address })) }))),
    );
    const configPath = join(dir, 'llm-extproc.yaml');
    const config = policyConfig(options.policy, options.tokenizerDir, options.picker);
    await writeFile(
      configPath,
      toYaml({
        listen: { grpc: '127.0.0.1:0', http: '127.0.0.1:0' },
        static: { path: endpointsFile },
        shutdownDrainSeconds: 0,
        shutdownGraceSeconds: 1,
        ...config,
      }),
    );
    const roundRobin = options.policy === 'round-robin';
    if (!roundRobin)
      for (let i = 0; i < options.processes; i++)
        pickers.push(await startExtprocProcess({ configPath, startTimeoutMs: 60_000, nodeArgs: options.nodeArgs ?? [] }));
    const rendered = renderGatewayConfig({
      ...DEFAULT_GATEWAY_OPTIONS,
      listener: { address: '127.0.0.1', port: 0 },
      admin: { address: '127.0.0.1', port: 0 },
      extProc: roundRobin ? '127.0.0.1:9' : pickers[0].grpcAddress,
      routeTimeoutSeconds: 120,
      backends: { kind: 'static', addresses: servers.map((s) => s.address) },
    });
    const envoyConfig = roundRobin
      ? withoutExtProc(rendered)
      : withAllPickers(
          rendered,
          pickers.map((p) => p.grpcAddress),
        );
    envoy = await startEnvoy({ configYaml: toYaml(envoyConfig), name: `cache-${options.policy}` });
    const port = envoy.listenerPort('llm_gateway');
    return { port, pickers, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}

/** Round-robin: Envoy alone (no ext_proc filter), its backends cluster balancing by round robin. */
function withoutExtProc(config: Record<string, unknown>): Record<string, unknown> {
  const parsed = JSON.parse(JSON.stringify(config)) as {
    static_resources: {
      listeners: Array<{ filter_chains?: Array<{ filters: Array<{ typed_config: { http_filters?: Array<{ name: string }> } }> }> }>;
      clusters: Array<Record<string, unknown>>;
    };
  };
  for (const listener of parsed.static_resources.listeners)
    for (const chain of listener.filter_chains ?? [])
      for (const filter of chain.filters) {
        const filters = filter.typed_config.http_filters;
        if (filters !== undefined) filter.typed_config.http_filters = filters.filter((f) => !f.name.includes('ext_proc'));
      }
  for (const cluster of parsed.static_resources.clusters) {
    if (cluster.name !== 'llm_backends') continue;
    cluster.load_balancing_policy = {
      policies: [
        {
          typed_extension_config: {
            name: 'envoy.load_balancing_policies.round_robin',
            typed_config: { '@type': 'type.googleapis.com/envoy.extensions.load_balancing_policies.round_robin.v3.RoundRobin' },
          },
        },
      ],
    };
  }
  return parsed;
}

/**
 * Empties the servers' caches and, for a precise fleet, waits until every process holds a trusted
 * index of every server: the reset's AllBlocksCleared makes an index exact, but only one whose
 * subscription was up when it was published, so every process is subscribed to all first.
 */
export async function resetForRun(servers: readonly VllmServer[], fleet: Fleet, precise: boolean): Promise<void> {
  // Subscribed first: what is published before a subscriber's handshake never reaches it.
  if (precise)
    await waitUntil(
      async () =>
        (
          await Promise.all(
            fleet.pickers.map(async (p) => (await publishers(p, 'connecting')) === 0 && (await publishers(p)) === servers.length),
          )
        ).every(Boolean)
          ? true
          : undefined,
      { description: `every llm-extproc process subscribed to all ${servers.length} servers' KV events`, timeoutMs: 60_000 },
    );
  if (!precise) {
    await resetCaches(servers);
    return;
  }
  // One pool holds every server, so its gauge cannot say which is untrusted: all are reset again.
  await resetUntilTrusted(
    servers,
    async (reset) =>
      (await Promise.all(fleet.pickers.map((p) => publishers(p, 'trusted')))).every((n) => n === servers.length) ? [] : reset,
    `every llm-extproc process to hold a trusted KV-event index of all ${servers.length} servers (after AllBlocksCleared)`,
  );
}

/** Servers in one state (any state: all followed) in a process's publishers gauge. */
async function publishers(picker: ExtprocProcess, state?: string): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${picker.httpPort}/metrics`)).text();
  let count = 0;
  for (const line of text.split('\n'))
    if (line.startsWith('llm_extproc_kv_events_publishers{') && (state === undefined || line.includes(`state="${state}"`)))
      count += Number(line.split(' ').pop());
  return count;
}

interface StreamResult {
  readonly status: number;
  readonly ttftMs: number;
  readonly content: string;
  readonly ok: boolean;
  /** From the usage chunk, when the request asked for one: prompt tokens and how many were cached. */
  readonly usage?: { readonly promptTokens: number; readonly cachedTokens: number };
}

interface UsageChunk {
  readonly usage?: { readonly prompt_tokens?: number; readonly prompt_tokens_details?: { readonly cached_tokens?: number } | null } | null;
}

/**
 * One streamed chat request through the gateway: time to the first content chunk, and the answer's
 * text; with `usage`, the request asks for the usage chunk (`stream_options.include_usage`, as most
 * SDK clients do) and the result carries its prompt and cached token counts.
 */
export function streamChat(port: number, messages: readonly ChatMessage[], maxTokens = 8, usage = false): Promise<StreamResult> {
  const body = JSON.stringify({
    model: VLLM_MODEL,
    messages,
    max_tokens: maxTokens,
    temperature: 0,
    ignore_eos: true,
    stream: true,
    ...(usage ? { stream_options: { include_usage: true } } : {}),
  });
  return new Promise((resolve) => {
    const started = performance.now();
    let first = Number.NaN;
    let text = '';
    const req = httpRequest(
      {
        host: '127.0.0.1',
        port,
        path: '/v1/chat/completions',
        method: 'POST',
        agent: false,
        headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
      },
      (res) => {
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => {
          if (Number.isNaN(first) && chunk.includes('"content"')) first = performance.now() - started;
          text += chunk;
        });
        res.on('end', () => {
          let content = '';
          let reported: StreamResult['usage'];
          for (const line of text.split('\n')) {
            if (!line.startsWith('data: {')) continue;
            const parsed = JSON.parse(line.slice(6)) as { choices?: Array<{ delta?: { content?: string } }> } & UsageChunk;
            content += parsed.choices?.[0]?.delta?.content ?? '';
            const promptTokens = parsed.usage?.prompt_tokens;
            if (promptTokens !== undefined)
              reported = { promptTokens, cachedTokens: parsed.usage?.prompt_tokens_details?.cached_tokens ?? 0 };
          }
          const ok = res.statusCode === 200 && text.includes('data: [DONE]');
          resolve({ status: res.statusCode ?? 0, ttftMs: first, content, ok, ...(reported === undefined ? {} : { usage: reported }) });
        });
        res.on('error', () => resolve({ status: res.statusCode ?? 0, ttftMs: first, content: '', ok: false }));
      },
    );
    req.setTimeout(120_000, () => req.destroy(new Error('timed out')));
    req.on('error', () => resolve({ status: 0, ttftMs: first, content: '', ok: false }));
    req.end(body);
  });
}

function percentile(sorted: readonly number[], q: number): number {
  return sorted.length === 0 ? Number.NaN : sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
}

/** Requests the clients have in flight at once, unless told otherwise (runWorkload). */
export const DEFAULT_REQUEST_SLOTS = 9;

/** How the clients send the workload (runWorkload). */
export interface ClientModel {
  /** Requests at once (default DEFAULT_REQUEST_SLOTS). */
  readonly concurrency?: number;
  /**
   * Sessions open at once (default: one per request slot: each client sends its next turn the
   * moment the answer arrives). With more users than slots a finished turn's follow-up joins the
   * back of the queue of turns ready to send, behind other users' turns, as when people read an
   * answer before they reply: the server that answered it has meanwhile taken other work.
   */
  readonly users?: number;
  /** Clients ask for usage: llm-extproc then measures prefill per token, and the run reports hits per kind of session. */
  readonly clientUsage?: boolean;
}

/** One turn ready to send: its session, which turn, and the answers so far. */
interface ReadyTurn {
  readonly session: Session;
  readonly turn: number;
  readonly answers: string[];
}

/** Runs the sessions through the fleet (`clients`: how they send); returns vLLM's and the client's figures. */
export async function runWorkload(
  servers: readonly VllmServer[],
  fleet: Fleet,
  policy: CachePolicy,
  processes: number,
  sessions: readonly Session[],
  /** One per server, connected: what they evict is counted from their events. */
  subscribers: readonly KvEventSubscriber[],
  clients: ClientModel = {},
): Promise<CacheRun> {
  const concurrency = clients.concurrency ?? DEFAULT_REQUEST_SLOTS;
  const users = Math.max(concurrency, clients.users ?? concurrency);
  const clientUsage = clients.clientUsage ?? false;
  const before = await Promise.all(servers.map(serverCounters));
  for (const subscriber of subscribers) subscriber.batches.length = 0;
  const ttfts: number[] = [];
  let failed = 0;
  let requests = 0;
  // Prompt and cached tokens the answers reported, for tenants' sessions and for conversations.
  const reported = { tenants: [0, 0], conversations: [0, 0] };
  // Turns ready to send, first in first out; sessions open while fewer than `users` are.
  const ready: ReadyTurn[] = [];
  let nextSession = 0;
  let openSessions = 0;
  let sending = 0;
  let idle: Array<() => void> = [];
  const wakeAll = (): void => {
    const waiting = idle;
    idle = [];
    for (const wake of waiting) wake();
  };
  const started = performance.now();
  const worker = async (): Promise<void> => {
    for (;;) {
      while (openSessions < users && nextSession < sessions.length) {
        const session = sessions[nextSession++];
        if (session.turns.length === 0) continue; // nothing to send (a workload of 0 turns per session)
        ready.push({ session, turn: 0, answers: [] });
        openSessions++;
      }
      const item = ready.shift();
      if (item === undefined) {
        if (sending === 0 && openSessions === 0) return wakeAll();
        // A turn in flight will queue its follow-up (or close its session): wait for it.
        await new Promise<void>((resolve) => idle.push(resolve));
        continue;
      }
      const { session, turn, answers } = item;
      sending++;
      const result = await streamChat(fleet.port, turnMessages(session, turn, answers), 8, clientUsage);
      sending--;
      requests++;
      if (!result.ok) failed++;
      else ttfts.push(result.ttftMs);
      const kind = session.tenant >= 0 ? reported.tenants : session.system !== undefined ? reported.conversations : undefined;
      if (kind !== undefined && result.usage !== undefined) {
        kind[0] += result.usage.promptTokens;
        kind[1] += result.usage.cachedTokens;
      }
      answers.push(result.content);
      if (turn + 1 < session.turns.length) ready.push({ session, turn: turn + 1, answers });
      else openSessions--;
      wakeAll();
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  const seconds = (performance.now() - started) / 1000;
  const after = await Promise.all(servers.map(serverCounters));
  const hits = after.map((a, i) => a.hits - before[i].hits);
  const queries = after.map((a, i) => a.queries - before[i].queries);
  const evictions = subscribers.map((subscriber) =>
    subscriber.events().reduce((n, e) => n + (e.type === 'BlockRemoved' ? e.blockHashes.length : 0), 0),
  );
  ttfts.sort((a, b) => a - b);
  const sum = (values: readonly number[]): number => values.reduce((a, b) => a + b, 0);
  return {
    policy,
    processes,
    requests,
    failed,
    hitRatio: sum(queries) === 0 ? 0 : sum(hits) / sum(queries),
    serverHitRatios: hits.map((h, i) => (queries[i] === 0 ? 0 : h / queries[i])),
    evictions: sum(evictions),
    ttftP50Ms: percentile(ttfts, 0.5),
    ttftP99Ms: percentile(ttfts, 0.99),
    requestsPerSecond: requests / seconds,
    seconds,
    classHitRatios: clientUsage
      ? {
          tenants: reported.tenants[0] === 0 ? 0 : reported.tenants[1] / reported.tenants[0],
          conversations: reported.conversations[0] === 0 ? 0 : reported.conversations[1] / reported.conversations[0],
        }
      : undefined,
  };
}
