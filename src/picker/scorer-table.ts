// Every scorer, declared once. A row names the scorer (its key under `picker.weights` and, when it
// has settings, its own `picker.<name>` section), its default weight, what it prefers (the config's
// description of its weight), its settings with their defaults, and how the pipeline runs it.
// Derived from this table: the config schema (config/schema.ts) and so the chart's
// values.schema.json, the merge of a config file onto the defaults (config/picker-config.ts),
// DEFAULT_PICKER_SETTINGS (settings.ts), and the simulator's policies (scripts/simulate).
//
// A new scorer is its pure function (scorers.ts) and one row here, run `per-candidate`: asked once
// per pick what it makes of the request (a header, the prompt…), then once per candidate (its
// endpoint and signals, and whatever per-endpoint state the scorer keeps). The six built-in rows
// are run inside the pipeline's passes instead (typed arrays, kept load scores: picker.ts,
// candidate-set.ts), where a call per candidate per scorer would cost more than the scoring.

import { Type } from '@sinclair/typebox';
import type { Static, TObject, TProperties } from '@sinclair/typebox';
import type { Endpoint } from '../endpoints/model.js';
import type { SignalBoard } from './signals.js';
import type { PrefillCosts } from './scorers.js';
import { canTake } from './saturation.js';
import type { SaturationLimits } from './saturation.js';

/**
 * What the model servers' own KV-cache events say of one request's prompt (kv-cache/: the prompt
 * tokenized as the server will, cut in its blocks, looked up in each server's cached blocks).
 */
export interface PrefixMatch {
  /** Tokens of the prompt's leading whole blocks cached at `address`; undefined when its events are not trusted now (it is then placed as without events). */
  matchedTokens(address: string): number | undefined;
  /** The most any server has cached of the prompt (0: none). */
  readonly bestTokens: number;
}

/** What a scorer may read about the request it scores for. */
export interface ScoringRequest {
  readonly model: string;
  /** One request header's value (lower-case name); absent = the caller passes no headers. */
  readonly header?: (name: string) => string | undefined;
  /** Precise prefix matches from the servers' KV events; absent = none (no events, no tokenizer). */
  readonly prefix?: PrefixMatch;
  /** The replica (`ip:port`) the request's session was last placed on (routing/sessions.ts); absent = no session, or a new one. */
  readonly sessionAt?: string;
}

/**
 * What a per-candidate scorer makes of one request: each candidate's score in [0, 1] (higher =
 * better place), from its endpoint and its record in the board's signals (`signals[at + Field.…]`).
 */
export type CandidateScore = (endpoint: Endpoint, signals: Float64Array, at: number) => number;

/** A scorer run per candidate: made once per picker, asked once per pick. */
export interface CandidateScorer {
  /** Its score function for this request, or undefined when it has nothing to say (then it costs nothing per candidate). */
  forRequest(request: ScoringRequest): CandidateScore | undefined;
}

/** What a per-candidate scorer is made with: the endpoints' signals, and its own settings section. */
export interface ScorerContext<S> {
  readonly board: SignalBoard;
  readonly settings: S;
}

/** A scorer's own section of the config file, `picker.<name>`. */
export interface SettingsSection<S extends object, F extends TProperties = TProperties> {
  readonly description: string;
  /** Its fields in the config file, each optional (Type.Optional), described with their defaults. */
  readonly fields: F;
  readonly defaults: S;
  /** The settings a validated section gives: its values where it has them, `defaults` elsewhere. */
  read(section: Static<TObject<F>>, defaults: S): S;
  /** A rule across fields the schema cannot express: what is wrong (after `picker.<name>.`), or undefined. */
  check?(settings: S): string | undefined;
}

export interface ScorerRow<S extends object = object> {
  readonly weight: number;
  /** What it prefers, for the description of its weight (the default is appended). */
  readonly prefers: string;
  readonly settings?: SettingsSection<S>;
  /** `built-in`: run inside the pipeline's passes (see above); otherwise how to make it. */
  readonly runs: 'built-in' | { create(context: ScorerContext<S>): CandidateScorer };
}

export type ScorerTable = { readonly [name: string]: ScorerRow };

/** `defaults` with the values `given` has; what it leaves undefined keeps its default. */
export function withGiven<S extends object>(defaults: S, given: Partial<S>): S {
  const out: Partial<S> = { ...defaults };
  for (const key of Object.keys(given) as Array<keyof S>) if (given[key] !== undefined) out[key] = given[key];
  return out as S;
}

/** A section whose config fields are the settings' own fields, under the same names and units. */
function sameNames<S extends object, F extends TProperties>(section: Omit<SettingsSection<S, F>, 'read'>): SettingsSection<S, F> {
  return { ...section, read: (given, defaults) => withGiven(defaults, given as Partial<S>) };
}

// ── the rows ────────────────────────────────────────────────────────────────────────────────

/** Prefix affinity's settings (the rendezvous owner of a prompt's key, with bounded load). */
export interface PrefixSettings {
  /** Affinity key = hash of the shared prompt's first keyBlocks whole cache blocks (fewer if it has fewer). */
  readonly keyBlocks: number;
  /** Tokens per KV-cache block of the model servers, for pools without their own. */
  readonly blockTokens: number;
  /** Characters per token (estimated high), for pools without their own. */
  readonly charsPerToken: number;
  readonly loadFactor: number;
  readonly loadSlack: number;
  /** The owner gives its prefixes up while it reports more waiting requests than this. */
  readonly maxQueue: number;
  /** Prefill time per uncached prompt token, until the pool's answers have measured it. */
  readonly prefillMsPerToken: number;
  /** What one more request ahead in a server's queue costs, until the pool's time to first token has been measured. */
  readonly queueMsPerRequest: number;
  /** How long a request takes (the scale a saving is judged against), until the pool's answers have measured it. */
  readonly requestMs: number;
}

/**
 * Tight bounds: an LLM server with a full batch makes every new request wait, so a prefix owner
 * gives way as soon as it reports a queue or runs 10 % (+1) above the mean (see docs/benchmarks.md,
 * simulation).
 */
export const DEFAULT_BOUNDED_LOAD = { factor: 1.1, slack: 1, maxQueue: 0 } as const;

/** How a pool's model servers cut their prefix cache. */
export interface CacheBlockSize {
  /** Tokens per KV-cache block (vLLM `--block-size`). */
  readonly blockTokens: number;
  /** Characters per token, estimated high. */
  readonly charsPerToken: number;
}

/**
 * vLLM's default KV-cache block (`--block-size 16` on GPUs) and four characters per token: the
 * usual figure for English text with BPE tokenizers. Code and most other languages give fewer
 * characters per token, so for them four undercounts tokens, the safe side: a block we call whole
 * is whole on the server.
 */
export const DEFAULT_CACHE_BLOCK: CacheBlockSize = { blockTokens: 16, charsPerToken: 4 };

const BlockTokens = (description: string) => Type.Optional(Type.Integer({ minimum: 1, maximum: 1024, description }));
const CharsPerToken = (description: string) => Type.Optional(Type.Number({ minimum: 0.5, maximum: 32, description }));
/** The config fields of a pool's own cache block (picker.pools.<name>), beside picker.prefix's. */
export const POOL_CACHE_BLOCK_FIELDS = {
  blockTokens: BlockTokens("Tokens per KV-cache block of this pool's servers. Default picker.prefix.blockTokens."),
  charsPerToken: CharsPerToken("Characters per token for this pool's tokenizer, estimated high. Default picker.prefix.charsPerToken."),
};

const PREFIX_DEFAULTS: PrefixSettings = {
  // 16 blocks of 16 tokens: the first ~256 tokens (about 1 KiB of text) decide the owner.
  keyBlocks: 16,
  blockTokens: DEFAULT_CACHE_BLOCK.blockTokens,
  charsPerToken: DEFAULT_CACHE_BLOCK.charsPerToken,
  loadFactor: DEFAULT_BOUNDED_LOAD.factor,
  loadSlack: DEFAULT_BOUNDED_LOAD.slack,
  maxQueue: DEFAULT_BOUNDED_LOAD.maxQueue,
  // Until measured: a GPU server prefills a few thousand tokens in a few hundred ms, and a request
  // ahead in its queue delays the next by about a time to first token. Both are replaced by the
  // pool's own figures as its streamed answers come in (latency-tracker.ts).
  prefillMsPerToken: 0.1,
  queueMsPerRequest: 100,
  requestMs: 2000,
};

/** The cost figures the prefix settings give, for pools not measured yet. */
export function prefillCostsOf(prefix: PrefixSettings): PrefillCosts {
  return {
    prefillSecondsPerToken: prefix.prefillMsPerToken / 1000,
    queueSecondsPerRequest: prefix.queueMsPerRequest / 1000,
    requestSeconds: prefix.requestMs / 1000,
  };
}

const PREFIX = sameNames({
  description: 'Prefix-cache affinity (rendezvous hashing with bounded load).',
  defaults: PREFIX_DEFAULTS,
  fields: {
    keyBlocks: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: 64,
        description: `Affinity key = hash of the shared prompt's first keyBlocks whole KV-cache blocks (all of them when fewer; none = no affinity). Default ${PREFIX_DEFAULTS.keyBlocks}.`,
      }),
    ),
    blockTokens: BlockTokens(`Tokens per KV-cache block of the model servers (vLLM --block-size). Default ${PREFIX_DEFAULTS.blockTokens}.`),
    charsPerToken: CharsPerToken(
      `Characters per token, estimated high so that a block counted whole is whole on the server. Default ${PREFIX_DEFAULTS.charsPerToken}.`,
    ),
    loadFactor: Type.Optional(
      Type.Number({
        minimum: 1,
        description: `Bounded load: the owner keeps a prefix while its load ≤ loadFactor × mean + loadSlack. Default ${PREFIX_DEFAULTS.loadFactor}.`,
      }),
    ),
    loadSlack: Type.Optional(Type.Number({ minimum: 0, description: `See loadFactor. Default ${PREFIX_DEFAULTS.loadSlack}.` })),
    maxQueue: Type.Optional(
      Type.Integer({
        minimum: 0,
        description: `The owner gives its prefixes up while it reports more waiting requests than this. Default ${PREFIX_DEFAULTS.maxQueue}.`,
      }),
    ),
    prefillMsPerToken: Type.Optional(
      Type.Number({
        exclusiveMinimum: 0,
        description: `Cost model: prefill time per uncached prompt token, used until the pool's streamed answers with usage have measured it. Default ${PREFIX_DEFAULTS.prefillMsPerToken}.`,
      }),
    ),
    requestMs: Type.Optional(
      Type.Number({
        exclusiveMinimum: 0,
        description: `Cost model: how long a request takes, pick to last token (a saving is judged against it), used until the pool's answers have measured it. Default ${PREFIX_DEFAULTS.requestMs}.`,
      }),
    ),
    queueMsPerRequest: Type.Optional(
      Type.Number({
        exclusiveMinimum: 0,
        description: `Cost model: what one more request ahead in a server's queue costs, used until the pool's time to first token has been measured. Default ${PREFIX_DEFAULTS.queueMsPerRequest}.`,
      }),
    ),
  },
});

export interface LoraSettings {
  /** Adapters a server may hold before LoRA affinity stops sending it new ones. */
  readonly maxAdaptersPerServer: number;
}

const LORA_DEFAULTS: LoraSettings = { maxAdaptersPerServer: 4 };

const LORA = sameNames({
  description: 'LoRA affinity.',
  defaults: LORA_DEFAULTS,
  fields: {
    maxAdaptersPerServer: Type.Optional(
      Type.Integer({
        minimum: 1,
        description: `Adapters a server may hold before LoRA affinity stops adding new ones to it. Default ${LORA_DEFAULTS.maxAdaptersPerServer}.`,
      }),
    ),
  },
});

/** How recent latency is estimated, and when a replica counts as much slower than its pool. */
export interface LatencySettings {
  /** A sample loses half its weight in this time. */
  readonly halfLifeMs: number;
  /** Decayed samples an estimate needs before it is trusted (untrusted = scored as the median). */
  readonly minSamples: number;
  /** Demoted at this many times the pool's median TTFT or TPOT (needs 3 trusted replicas in the pool). */
  readonly outlierFactor: number;
  /** A demoted replica is reinstated at or below this many times the median (hysteresis). */
  readonly recoverFactor: number;
  /** A demoted replica gets one probe request this often, so that a recovery can be seen. */
  readonly probeIntervalMs: number;
  /** Latencies below these are never called slow, whatever the ratio (jitter next to a tiny median). */
  readonly floorTtftSeconds: number;
  readonly floorTpotSeconds: number;
}

/**
 * Ten seconds of memory: long enough that one slow answer does not demote a replica, short enough
 * that a slowdown is acted on within seconds at a few requests per second per replica.
 */
export const DEFAULT_LATENCY: LatencySettings = {
  halfLifeMs: 10_000,
  minSamples: 3,
  outlierFactor: 2,
  recoverFactor: 1.5,
  probeIntervalMs: 2000,
  floorTtftSeconds: 0.02,
  floorTpotSeconds: 0.002,
};

const LATENCY_FIELDS = {
  halfLifeSeconds: Type.Optional(
    Type.Number({
      minimum: 0.1,
      description: `A latency sample loses half its weight in this time. Default ${DEFAULT_LATENCY.halfLifeMs / 1000}.`,
    }),
  ),
  minSamples: Type.Optional(
    Type.Number({
      minimum: 1,
      description: `Decayed samples a replica's estimate needs before it counts. Default ${DEFAULT_LATENCY.minSamples}.`,
    }),
  ),
  outlierFactor: Type.Optional(
    Type.Number({
      minimum: 1.1,
      description: `A replica whose TTFT or TPOT is this many times its pool's median is demoted (reason slow_replica; needs 3 measured replicas). Default ${DEFAULT_LATENCY.outlierFactor}.`,
    }),
  ),
  recoverFactor: Type.Optional(
    Type.Number({
      minimum: 1,
      description: `A demoted replica is reinstated at or below this many times the median (< outlierFactor). Default ${DEFAULT_LATENCY.recoverFactor}.`,
    }),
  ),
  probeIntervalSeconds: Type.Optional(
    Type.Number({
      minimum: 0.05,
      description: `A demoted replica gets one probe request this often, so that a recovery is seen. Default ${DEFAULT_LATENCY.probeIntervalMs / 1000}.`,
    }),
  ),
};

const LATENCY: SettingsSection<LatencySettings, typeof LATENCY_FIELDS> = {
  description: 'Latency as a picking signal, and demotion of replicas much slower than their pool.',
  defaults: DEFAULT_LATENCY,
  fields: LATENCY_FIELDS,
  read: ({ halfLifeSeconds, probeIntervalSeconds, ...same }, defaults) => ({
    ...withGiven(defaults, same),
    ...(halfLifeSeconds === undefined ? {} : { halfLifeMs: halfLifeSeconds * 1000 }),
    ...(probeIntervalSeconds === undefined ? {} : { probeIntervalMs: probeIntervalSeconds * 1000 }),
  }),
  check: (settings) =>
    settings.recoverFactor < settings.outlierFactor
      ? undefined
      : `recoverFactor: must be < outlierFactor (${settings.outlierFactor}), or a demoted replica would be reinstated as soon as it is demoted`,
};

/** Session affinity (routing/sessions.ts): which header names a session, how long and how many are remembered, when a session's replica is given up. */
export interface SessionSettings {
  /** The request header naming a session, and the response header that carries its token back (llm-d's name by default). */
  readonly header: string;
  /** Further request headers read when `header` is absent (AIBrix's `x-session-id`). */
  readonly aliases: readonly string[];
  /** A session (by its client-chosen id) is forgotten after this long unused. */
  readonly ttlMs: number;
  /** Sessions (by client-chosen id) remembered per llm-extproc process; the least recently used goes first. */
  readonly maxSessions: number;
  /** Keys of the tokens, one per line, the first signs (a file mounted from a Secret, the same on every replica); undefined = the built-in key. */
  readonly keyFile: string | undefined;
  /** The session's replica is given up while it reports this many waiting requests… */
  readonly queueDepth: number;
  /** …or this KV-cache use (0..1). */
  readonly kvCacheUsage: number;
}

const SESSION_DEFAULTS: SessionSettings = {
  header: 'x-session-token',
  aliases: ['x-session-id'],
  // llm-d's session_id strategy forgets a binding after 300 s unused.
  ttlMs: 300_000,
  maxSessions: 100_000,
  keyFile: undefined,
  // The saturation figures flow control uses by default (saturation.ts): a replica past them would
  // queue the turn, which costs more than its warm cache saves.
  queueDepth: 5,
  kvCacheUsage: 0.8,
};

const HeaderName = Type.String({ pattern: "^[a-z0-9!#$%&'*+.^_`|~-]+$", errorMessage: 'expected a lower-case HTTP header name' });
const SESSION_FIELDS = {
  header: Type.Optional({
    ...HeaderName,
    description: `The request header naming a session; the response carries the replica's token back in it, to be sent on the next turn. Default ${SESSION_DEFAULTS.header} (llm-d's).`,
  }),
  aliases: Type.Optional(
    Type.Array(HeaderName, {
      maxItems: 4,
      description: `Request headers read when the main one is absent, in order. Default [${SESSION_DEFAULTS.aliases.join(', ')}] (AIBrix's).`,
    }),
  ),
  ttlSeconds: Type.Optional(
    Type.Number({
      minimum: 1,
      description: `A session named by a client-chosen id is forgotten after this long unused (a token needs no memory). Default ${SESSION_DEFAULTS.ttlMs / 1000}.`,
    }),
  ),
  maxSessions: Type.Optional(
    Type.Integer({
      minimum: 1,
      description: `Sessions named by client-chosen ids remembered per process; the least recently used is forgotten first. Default ${SESSION_DEFAULTS.maxSessions}.`,
    }),
  ),
  keyFile: Type.Optional(
    Type.String({
      minLength: 1,
      description:
        'File with the keys of the session tokens, one per line (at least 16 bytes each), the first signing new tokens: a Secret mounted on every replica. Absent = a built-in key (tokens then still name only pods of the pool, but are not unforgeable).',
    }),
  ),
  queueDepth: Type.Optional(
    Type.Integer({
      minimum: 1,
      description: `A session leaves its replica while the replica reports this many waiting requests. Default ${SESSION_DEFAULTS.queueDepth}.`,
    }),
  ),
  kvCacheUsage: Type.Optional(
    Type.Number({
      exclusiveMinimum: 0,
      maximum: 1,
      description: `A session leaves its replica while the replica reports this KV-cache use (0..1). Default ${SESSION_DEFAULTS.kvCacheUsage}.`,
    }),
  ),
};

const SESSION: SettingsSection<SessionSettings, typeof SESSION_FIELDS> = {
  description: 'Session affinity: the turns of a session (a header) go to the replica that served it while it is Ready and not saturated.',
  defaults: SESSION_DEFAULTS,
  fields: SESSION_FIELDS,
  read: ({ ttlSeconds, ...same }, defaults) => ({
    ...withGiven(defaults, same),
    ...(ttlSeconds === undefined ? {} : { ttlMs: ttlSeconds * 1000 }),
  }),
};

/**
 * The session scorer: the session's replica scores 1 while it can take the turn (saturation.ts's
 * test at the section's limits), every other replica 0. A replica that reports no metrics keeps
 * its sessions: nothing says it is full, and our in-flight count still weighs in the rest of the pick.
 */
function sessionScorer({ settings }: ScorerContext<SessionSettings>): CandidateScorer {
  const limits: SaturationLimits = {
    queueDepth: settings.queueDepth,
    kvCacheUsage: settings.kvCacheUsage,
    maxInFlight: Number.POSITIVE_INFINITY,
    scraped: false,
  };
  return {
    forRequest: (request) => {
      const at = request.sessionAt;
      if (at === undefined) return undefined;
      return (endpoint, signals, record) => (endpoint.address === at && canTake(signals, record, limits) ? 1 : 0);
    },
  };
}

/** The scorers, in the order their weighted scores are added up. */
export const SCORERS = {
  queue: {
    weight: 1,
    prefers:
      'Model-server queue depth (num_requests_waiting) less our requests in flight there when it was reported (counted live by inFlight), shorter first.',
    runs: 'built-in',
  },
  kvCache: { weight: 1, prefers: 'KV-cache utilisation, emptier first.', runs: 'built-in' },
  inFlight: { weight: 1, prefers: 'Our own in-flight requests per endpoint, fewer first.', runs: 'built-in' },
  // One scorer, the prefill saved, fed per candidate by one of two sources: the tokens its own
  // KV events say it holds (precise mode, where they are trusted), else the approximate estimate
  // (the affinity key's owner under bounded load is credited with the prompt's shared part).
  // The prefill saved, as a share of a whole request's time, is a small number (a 2,000-token
  // context saves about a third of a request): weighed 8, it outweighs a request or two of load
  // difference for long contexts and nothing for short ones (`npm run simulate`).
  prefix: {
    weight: 8,
    prefers:
      "Prefill saved against the queue joined: the prompt's tokens cached at a server (from its KV events, or at the rendezvous owner of the prompt prefix), less the requests ahead of it.",
    settings: PREFIX,
    runs: 'built-in',
  },
  lora: { weight: 2, prefers: 'LoRA affinity: servers already running the requested adapter.', settings: LORA, runs: 'built-in' },
  latency: {
    weight: 2,
    prefers: "Recent time to first token and per output token, against the pool's medians (0 also turns off demoting slow replicas).",
    settings: LATENCY,
    runs: 'built-in',
  },
  // Above every other scorer together: a session stays on its replica unless the replica is
  // saturated (its score is then 0), excluded by its pool's queue limit, demoted as slow while
  // another replica has room in its batch, or gone.
  session: {
    weight: 100,
    prefers: "Session affinity: the replica a session's earlier turns went to (header picker.session.header), while it is not saturated.",
    settings: SESSION,
    runs: { create: sessionScorer },
  },
} as const satisfies ScorerTable;

// ── what is derived ─────────────────────────────────────────────────────────────────────────

/** A weight for every scorer of a table. */
export type WeightsOf<T extends ScorerTable> = { readonly [K in keyof T]: number };
/** The settings of every scorer of a table that has a section, under its name. */
export type SectionsOf<T extends ScorerTable> = {
  readonly [K in keyof T as T[K] extends { readonly settings: SettingsSection<object> } ? K : never]: T[K] extends {
    readonly settings: SettingsSection<infer S>;
  }
    ? S
    : never;
};

export type ScorerWeights = WeightsOf<typeof SCORERS>;

/** Every scorer at its default weight. */
export function defaultWeights<T extends ScorerTable>(table: T): WeightsOf<T> {
  return weightsOf(table, (name) => table[name].weight);
}

/** The scorers named, at the weights given; every other scorer off (0). */
export function onlyScorers<T extends ScorerTable>(table: T, weights: Partial<WeightsOf<T>>): WeightsOf<T> {
  return weightsOf(table, (name) => weights[name] ?? 0);
}

function weightsOf<T extends ScorerTable>(table: T, weight: (name: keyof T) => number): WeightsOf<T> {
  const out: Partial<Record<keyof T, number>> = {};
  for (const name of Object.keys(table) as Array<keyof T>) out[name] = weight(name);
  return out as WeightsOf<T>;
}

/** Each section's defaults, under its scorer's name. */
export function sectionDefaults<T extends ScorerTable>(table: T): SectionsOf<T> {
  const out: Record<string, object> = {};
  for (const [name, row] of Object.entries(table)) if (row.settings !== undefined) out[name] = row.settings.defaults;
  return out as SectionsOf<T>;
}

/** Sum of the weights of the scorers the pipeline runs in its passes. */
export function builtInWeight<T extends ScorerTable>(table: T, weights: WeightsOf<T>): number {
  let sum = 0;
  for (const name of Object.keys(table) as Array<keyof T & string>) if (table[name].runs === 'built-in') sum += weights[name];
  return sum;
}

/** A per-candidate scorer made for a picker, with its weight. */
export interface WeightedScorer {
  readonly name: string;
  readonly weight: number;
  readonly scorer: CandidateScorer;
}

/** The per-candidate scorers of a table that are on (weight > 0), made with their settings. */
export function candidateScorers<T extends ScorerTable>(
  table: T,
  weights: WeightsOf<T>,
  sections: SectionsOf<T>,
  board: SignalBoard,
): WeightedScorer[] {
  const out: WeightedScorer[] = [];
  for (const name of Object.keys(table) as Array<keyof T & string>) {
    const row = table[name];
    const weight = weights[name];
    if (row.runs === 'built-in' || !(weight > 0)) continue;
    const settings = (sections as Readonly<Record<string, object>>)[name] ?? {};
    out.push({ name, weight, scorer: row.runs.create({ board, settings }) });
  }
  return out;
}

/** Every scorer's weight: the one given, else its default. */
export function mergedWeights<T extends ScorerTable>(table: T, given: Partial<WeightsOf<T>> | undefined): WeightsOf<T> {
  return weightsOf(table, (name) => given?.[name] ?? table[name].weight);
}

/**
 * Every section's settings from what the config file gives under `picker.<name>` (validated by
 * the schema), over its defaults. A section that breaks its own rule goes to `refuse`, with a
 * message that names the field.
 */
export function mergedSections<T extends ScorerTable>(table: T, given: object, refuse: (message: string) => never): SectionsOf<T> {
  const sections = given as Readonly<Record<string, Readonly<Record<string, unknown>> | undefined>>;
  const out: Record<string, object> = {};
  for (const [name, row] of Object.entries(table)) {
    const section = row.settings;
    if (section === undefined) continue;
    const settings = section.read(sections[name] ?? {}, section.defaults);
    const wrong = section.check?.(settings);
    if (wrong !== undefined) refuse(`picker.${name}.${wrong}`);
    out[name] = settings;
  }
  return out as SectionsOf<T>;
}
