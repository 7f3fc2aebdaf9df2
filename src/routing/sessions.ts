// Session affinity: the turns of a conversation (or of an agent loop) go to the replica that holds
// its KV cache, even when their prompts share no leading block with anything. A request names its
// session in a header (picker.session.header, llm-d's `x-session-token`; aliases such as AIBrix's
// `x-session-id`). The first turn is placed by the normal pipeline; the replica it went to is then
// told back to the client as a token in the response header of the same name, and the client's
// next turn carries that token. A token holds no address: it is an HMAC of the replica's address
// under the session key, so it can only be matched against the pods of the pool we route to (a
// client cannot point us at an arbitrary endpoint, and with a key of its own the operator makes
// tokens unforgeable). Because the token travels with the client, every llm-extproc replica of an
// active-active set reads the same session the same way, with no shared state.
//
// A client may also name its session with an id of its own (anything that is not one of our
// tokens): that id is remembered here, in a bounded LRU with a TTL, per process. Ids therefore stay
// on one replica only while the same llm-extproc process sees them, unless the client sends the
// token back, as llm-d's clients do.
//
// Where the session's replica is not a candidate (not Ready, gone) or cannot take the turn
// (saturated: the scorer's row), the pipeline places the turn as a new one and the session follows
// the replica it went to. Nothing here runs for a request without a session header.

import { createHmac } from 'node:crypto';
import type { Endpoint, PoolView } from '../endpoints/model.js';
import type { SessionSettings } from '../picker/scorer-table.js';
import { TtlLru } from '../util/ttl-lru.js';
import type { EvictionReason } from '../util/ttl-lru.js';

/** Every token starts so: what tells a token from a client's own session id. */
export const TOKEN_PREFIX = 'lxs1.';
/** Bytes of the HMAC kept in a token (128 bits, as a truncated HMAC-SHA-256 tag usually is). */
const TAG_BYTES = 16;
/**
 * The key when the operator sets none. Public (it is in our source): tokens made with it are
 * opaque and still only ever match a pod of the pool, but a client that knows a pod's address
 * could make one. picker.session.keyFile gives a secret one.
 */
const BUILT_IN_KEY = Buffer.from('llm-extproc session affinity: set picker.session.keyFile for unforgeable tokens');

/** What became of a request that named a session (the metric's `result`). */
export type SessionResult =
  /** A session we knew nothing of (a new id, or a token that names no pod of the pool): placed by the pipeline. */
  | 'new'
  /** Went to its session's replica. */
  | 'kept'
  /** Its replica was known but could not take it (not Ready, saturated, demoted): placed elsewhere, and the session follows. */
  | 'moved'
  /** Looked like one of our tokens but matched no pod of the pool under any key: forged, made under an old key, or the pod is gone. */
  | 'unknown_token';

export interface SessionObserver {
  placed(result: SessionResult): void;
  forgotten(reason: EvictionReason): void;
}

/** The session a request names, as read from its headers. */
export interface SessionRef {
  readonly value: string;
  readonly isToken: boolean;
}

/** What the routing knows of a session before the pick. */
export interface SessionPlace {
  readonly ref: SessionRef;
  /** The replica its last turn went to, when it is still in the pool (any state). */
  readonly at: string | undefined;
  readonly unknownToken: boolean;
}

/** The response side: the header to set, and the token naming a replica. */
export interface SessionReply {
  readonly header: string;
  tokenFor(endpoint: Endpoint): string;
}

export interface SessionOptions {
  /** Keys of the tokens, the first signs; empty = the built-in key. */
  readonly keys: readonly Buffer[];
  readonly observer?: SessionObserver;
  /** Milliseconds, monotonic; performance.now in production. */
  readonly now?: () => number;
}

/** The token of a replica's address under one key. */
export function sessionToken(key: Buffer, address: string): string {
  return TOKEN_PREFIX + createHmac('sha256', key).update(address).digest().subarray(0, TAG_BYTES).toString('base64url');
}

export class SessionAffinity implements SessionReply {
  readonly header: string;
  private readonly headers: readonly string[];
  private readonly keys: readonly Buffer[];
  private readonly ids: TtlLru<string>;
  /** Each pool view's tokens under every key → the address they name (built once per view, on the first session request). */
  private readonly indexes = new WeakMap<readonly PoolView[], ReadonlyMap<string, string>>();
  /** Each endpoint's token under the signing key (endpoints are immutable: replaced, never changed). */
  private readonly tokens = new WeakMap<Endpoint, string>();
  private readonly observer: SessionObserver | undefined;

  constructor(settings: SessionSettings, options: SessionOptions) {
    this.header = settings.header;
    this.headers = [settings.header, ...settings.aliases.filter((name) => name !== settings.header)];
    this.keys = options.keys.length > 0 ? options.keys : [BUILT_IN_KEY];
    this.observer = options.observer;
    this.ids = new TtlLru<string>(settings.maxSessions, settings.ttlMs, options.now ?? (() => performance.now()), (reason) =>
      this.observer?.forgotten(reason),
    );
  }

  /** Sessions remembered by id now (expired ones included until they are next touched). */
  get remembered(): number {
    return this.ids.size;
  }

  /** The session a request names; undefined (and nothing else done) when it names none. */
  read(header: ((name: string) => string | undefined) | undefined): SessionRef | undefined {
    if (header === undefined) return undefined;
    for (const name of this.headers) {
      const value = header(name);
      if (value !== undefined && value !== '') return { value, isToken: value.startsWith(TOKEN_PREFIX) };
    }
    return undefined;
  }

  /** Where the session's last turn went, among the pools a request may go to. */
  placeOf(ref: SessionRef, pools: readonly PoolView[]): SessionPlace {
    if (!ref.isToken) return { ref, at: this.ids.get(ref.value), unknownToken: false };
    const at = this.indexOf(pools).get(ref.value);
    return { ref, at, unknownToken: at === undefined };
  }

  /** The pick's primary: what became of the session, and where its next turn goes. */
  placed(place: SessionPlace, primary: Endpoint): void {
    if (!place.ref.isToken) this.ids.set(place.ref.value, primary.address);
    const result: SessionResult = place.unknownToken
      ? 'unknown_token'
      : place.at === undefined
        ? 'new'
        : place.at === primary.address
          ? 'kept'
          : 'moved';
    this.observer?.placed(result);
  }

  tokenFor(endpoint: Endpoint): string {
    let token = this.tokens.get(endpoint);
    if (token === undefined) this.tokens.set(endpoint, (token = sessionToken(this.keys[0], endpoint.address)));
    return token;
  }

  /** Tokens under every key of every endpoint of the pools (whatever its state) → its address. */
  private indexOf(pools: readonly PoolView[]): ReadonlyMap<string, string> {
    let index = this.indexes.get(pools);
    if (index === undefined) {
      const built = new Map<string, string>();
      for (const pool of pools)
        for (const endpoint of pool.endpoints) {
          if (endpoint.address === '') continue;
          for (const key of this.keys) built.set(sessionToken(key, endpoint.address), endpoint.address);
        }
      this.indexes.set(pools, (index = built));
    }
    return index;
  }
}

/** The keys of a key file's text: one per non-empty line, at least 16 bytes each (what is wrong, else the keys). */
export function parseSessionKeys(text: string): { readonly keys: readonly Buffer[] } | { readonly error: string } {
  const keys: Buffer[] = [];
  for (const line of text.split(/\r?\n/)) {
    const key = line.trim();
    if (key === '') continue;
    if (Buffer.byteLength(key) < 16) return { error: `key ${keys.length + 1} is shorter than 16 bytes` };
    keys.push(Buffer.from(key));
  }
  return keys.length === 0 ? { error: 'it holds no key' } : { keys };
}
