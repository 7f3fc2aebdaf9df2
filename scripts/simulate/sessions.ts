// The multi-turn scenario of `npm run simulate`: conversations whose turns are short and unrelated
// to any other conversation's, so after its first turn a session shares no leading block with
// anything but its own history. Each turn's prompt is the whole conversation so far (earlier
// prompts and answers) plus a short new message; the next turn is sent when the answer is complete,
// after a think time. The server that answered a turn holds that history in its prefix cache
// (vLLM's: whole 16-token blocks, LRU), so a turn is cheap exactly when it goes back there.
//
// Without session affinity a turn is placed by load and by the prefix key of its conversation's
// opening (the first whole blocks of its first message, or of its first exchange when that message
// holds none: src/routing/affinity-key.ts), the same for every turn, so a conversation's turns
// after the first share an owner on every llm-extproc replica (the first, with nothing cached
// anywhere, is placed by load). With it (the real SessionAffinity of
// src/routing/sessions.ts, the client sending back each answer's token), every turn after the
// first goes where the session started, while that server can take it. Deterministic for a seed.

import type { Endpoint, PoolView } from '../../src/endpoints/model.js';
import { Picker } from '../../src/picker/picker.js';
import { candidateScorers, SCORERS, sectionDefaults } from '../../src/picker/scorer-table.js';
import { DEFAULT_PICKER_SETTINGS, DEFAULT_WEIGHTS } from '../../src/picker/settings.js';
import { SignalBoard } from '../../src/picker/signals.js';
import { SessionAffinity } from '../../src/routing/sessions.js';
import { Events, percentile, prng, scrapeAll } from './kernel.js';
import { PrefixCache } from './sim.js';

export interface SessionSimConfig {
  readonly seed: number;
  readonly servers: number;
  readonly slots: number;
  readonly cacheBlocks: number;
  readonly sessions: number;
  readonly turns: number;
  /** New sessions per second (Poisson). */
  readonly sessionRate: number;
  /** Tokens of a turn's new message, and of its answer. */
  readonly messageTokens: readonly [number, number];
  readonly answerTokens: readonly [number, number];
  /** Mean seconds between an answer and the next turn (exponential). */
  readonly thinkSeconds: number;
  readonly prefillMsPerToken: number;
  readonly decodeMsPerToken: number;
  readonly scrapeMs: number;
  /** llm-extproc replicas: each turn goes to one at random (a token needs no shared state). */
  readonly routers: number;
}

export const DEFAULT_SESSION_SIM: SessionSimConfig = {
  seed: 7,
  servers: 8,
  slots: 8,
  cacheBlocks: 1024,
  sessions: 1500,
  turns: 8,
  sessionRate: 2.5,
  messageTokens: [20, 120],
  answerTokens: [40, 300],
  thinkSeconds: 4,
  prefillMsPerToken: 0.4,
  decodeMsPerToken: 12,
  scrapeMs: 250,
  routers: 3,
};

export type SessionPolicy = 'pipeline without sessions' | 'pipeline';
export const SESSION_POLICIES: readonly SessionPolicy[] = ['pipeline without sessions', 'pipeline'];

export interface SessionSimResult {
  readonly policy: SessionPolicy;
  readonly turns: number;
  /** Whole prompt blocks served from a prefix cache / all whole prompt blocks (turns after the first). */
  readonly cacheHitRatio: number;
  /** Turns after the first that went to the server of the turn before. */
  readonly sameServer: number;
  readonly meanTtftMs: number;
  readonly p99TtftMs: number;
}

const BLOCK_TOKENS = 16;
/** picker.prefix.keyBlocks' default: the prefix key is the chained hash of the first 16 whole blocks. */
const KEY_BLOCKS = 16;

interface Conversation {
  readonly id: number;
  /** Token ids of the conversation so far (ids unique to the session: nothing is shared). */
  readonly tokens: number[];
  /** Tokens of its first message (the opening), and of its first exchange (that and its answer). */
  opening: number;
  exchange: number;
  turn: number;
  /** The server of the last turn, and the token its answer carried. */
  lastServer: string | undefined;
  token: string | undefined;
}

interface Server {
  readonly address: string;
  readonly cache: PrefixCache;
  readonly queue: Array<{
    readonly conversation: Conversation;
    readonly router: Router;
    readonly arrival: number;
    readonly blocks: number[];
  }>;
  running: number;
}

interface Router {
  readonly board: SignalBoard;
  readonly picker: Picker;
}

type SessionEvent =
  | { time: number; kind: 'turn'; conversation: Conversation }
  | { time: number; kind: 'finish'; server: Server; router: Router; conversation: Conversation }
  | { time: number; kind: 'scrape' };

/** Chained hashes of a token list's whole blocks (vLLM's block keys). */
function blockHashes(tokens: readonly number[]): number[] {
  const out: number[] = [];
  let h = 0x811c9dc5;
  for (let b = 0; b + BLOCK_TOKENS <= tokens.length; b += BLOCK_TOKENS) {
    for (let i = b; i < b + BLOCK_TOKENS; i++) h = Math.imul(h ^ tokens[i], 0x01000193) >>> 0;
    out.push(h);
  }
  return out;
}

export function simulateSessions(config: SessionSimConfig, policy: SessionPolicy): SessionSimResult {
  const rand = prng(config.seed);
  const between = (range: readonly [number, number]): number => range[0] + Math.floor(rand() * (range[1] - range[0]));
  const servers: Server[] = Array.from({ length: config.servers }, (_, i) => ({
    address: `10.2.0.${i + 1}:8000`,
    cache: new PrefixCache(config.cacheBlocks),
    queue: [],
    running: 0,
  }));
  const byAddress = new Map(servers.map((s) => [s.address, s]));
  const endpoints: Endpoint[] = servers.map((s) => ({ id: s.address, address: s.address, state: 'Ready', reason: '', pool: 'sim' }));
  const pools: PoolView[] = [{ name: 'sim', models: ['m'], endpoints }];
  const weights = policy === 'pipeline' ? DEFAULT_WEIGHTS : { ...DEFAULT_WEIGHTS, session: 0 };
  const sections = sectionDefaults(SCORERS);
  // One key for every router: what the chart's replicas share through a mounted Secret.
  const sessions = new SessionAffinity(DEFAULT_PICKER_SETTINGS.session, { keys: [] });
  const routers: Router[] = Array.from({ length: config.routers }, () => {
    const board = new SignalBoard();
    const picker = new Picker(board, {
      weights,
      scorers: candidateScorers(SCORERS, weights, sections, board),
      fallbacks: 2,
      boundedLoad: { factor: sections.prefix.loadFactor, slack: sections.prefix.loadSlack, maxQueue: sections.prefix.maxQueue },
      maxAdaptersPerServer: sections.lora.maxAdaptersPerServer,
      poolPolicy: () => ({}),
      random: rand,
    });
    return { board, picker };
  });
  const events = new Events<SessionEvent>();
  let nextToken = 1;
  let start = 0;
  for (let id = 0; id < config.sessions; id++) {
    start += (1000 / config.sessionRate) * -Math.log(1 - rand());
    events.push({
      time: start,
      kind: 'turn',
      conversation: { id, tokens: [], opening: 0, exchange: 0, turn: 0, lastServer: undefined, token: undefined },
    });
  }
  events.push({ time: 0, kind: 'scrape' });
  let open = config.sessions;
  let promptBlocks = 0;
  let cachedBlocks = 0;
  let followUps = 0;
  let sameServer = 0;
  const ttfts: number[] = [];
  const boards = routers.map((r) => r.board);

  const run = (server: Server, router: Router, conversation: Conversation, arrival: number, blocks: number[], now: number): void => {
    server.running++;
    const hits = server.cache.hits(blocks);
    server.cache.store(blocks);
    if (conversation.turn > 0) {
      promptBlocks += blocks.length;
      cachedBlocks += hits;
    }
    const prefill = (conversation.tokens.length - hits * BLOCK_TOKENS) * config.prefillMsPerToken;
    ttfts.push(now - arrival + prefill);
    const answer = between(config.answerTokens);
    for (let i = 0; i < answer; i++) conversation.tokens.push(nextToken++);
    if (conversation.turn === 0) conversation.exchange = conversation.tokens.length;
    events.push({ time: now + prefill + answer * config.decodeMsPerToken, kind: 'finish', server, router, conversation });
  };

  for (let event = events.pop(); event !== undefined; event = events.pop()) {
    const now = event.time;
    if (event.kind === 'scrape') {
      scrapeAll(boards, servers, (s) => s.running / config.slots, now);
      if (open > 0) events.push({ time: now + config.scrapeMs, kind: 'scrape' });
    } else if (event.kind === 'turn') {
      const conversation = event.conversation;
      // The shared part (everything before the new message) is what a server can hold; the
      // opening gives the prefix key, as the request reader cuts it.
      const shared = Math.floor(conversation.tokens.length / BLOCK_TOKENS);
      const message = between(config.messageTokens);
      for (let i = 0; i < message; i++) conversation.tokens.push(nextToken++);
      if (conversation.turn === 0) conversation.opening = message;
      const keyHashes = blockHashes(conversation.tokens.slice(0, conversation.opening));
      const material = keyHashes.length > 0 ? keyHashes : blockHashes(conversation.tokens.slice(0, conversation.exchange));
      const key = material.length > 0 ? material[Math.min(material.length, KEY_BLOCKS) - 1] : undefined;
      const router = routers[Math.floor(rand() * routers.length)];
      const header = (name: string): string | undefined =>
        name === 'x-session-token' ? (conversation.token ?? `conversation-${conversation.id}`) : undefined;
      const ref = weights.session > 0 ? sessions.read(header) : undefined;
      const place = ref === undefined ? undefined : sessions.placeOf(ref, pools);
      const outcome = router.picker.pick(pools, {
        model: 'm',
        ...(key === undefined ? {} : { affinityKey: key, sharedTokens: shared * BLOCK_TOKENS }),
        ...(place?.at === undefined ? {} : { sessionAt: place.at }),
      });
      if (outcome.kind !== 'picked') throw new Error(`session simulation: pick gave ${outcome.kind}`);
      const picked = outcome.endpoints[0];
      if (place !== undefined) {
        sessions.placed(place, picked);
        conversation.token = sessions.tokenFor(picked);
      }
      if (conversation.turn > 0) {
        followUps++;
        if (conversation.lastServer === picked.address) sameServer++;
      }
      conversation.lastServer = picked.address;
      const server = byAddress.get(picked.address) as Server;
      router.board.cell(server.address).inFlight++;
      const blocks = blockHashes(conversation.tokens);
      if (server.running < config.slots) run(server, router, conversation, now, blocks, now);
      else server.queue.push({ conversation, router, arrival: now, blocks });
    } else {
      const { server, router, conversation } = event;
      server.running--;
      router.board.cell(server.address).inFlight--;
      conversation.turn++;
      if (conversation.turn < config.turns)
        events.push({ time: now + config.thinkSeconds * 1000 * -Math.log(1 - rand()), kind: 'turn', conversation });
      else open--;
      const next = server.queue.shift();
      if (next !== undefined) run(server, next.router, next.conversation, next.arrival, next.blocks, now);
    }
  }
  ttfts.sort((a, b) => a - b);
  return {
    policy,
    turns: ttfts.length,
    cacheHitRatio: promptBlocks === 0 ? 0 : cachedBlocks / promptBlocks,
    sameServer: followUps === 0 ? 0 : sameServer / followUps,
    meanTtftMs: ttfts.reduce((a, b) => a + b, 0) / ttfts.length,
    p99TtftMs: percentile(ttfts, 0.99),
  };
}
