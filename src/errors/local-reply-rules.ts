// The codes our Envoy configs' local-reply mappers give Envoy's own replies, by response flags, in
// the mappers' order (first match wins). One table for both ends: tools/envoy-config renders the
// mappers from it, and llm-extproc reads it to record the code a client got when Envoy replaced a
// response with its own reply after llm-extproc had seen the upstream's headers (the upstream
// reset while Envoy still held them), so the `result` label is that reply's code.

import type { ErrorKind } from './catalog.js';
import { hasResponseFlag } from './envoy-response-flags.js';
import type { ResponseFlagName } from './envoy-response-flags.js';

export interface LocalReplyFlagRule {
  readonly kind: ErrorKind;
  /** Any one of these flags matches; `allOf` rules need every one. */
  readonly flags: readonly ResponseFlagName[];
  readonly allOf?: true;
  /** The message of the reply's body. */
  readonly message: string;
}

export const LOCAL_REPLY_FLAG_RULES: readonly LocalReplyFlagRule[] = [
  { kind: 'all_replicas_failed', flags: ['UF', 'URX'], allOf: true, message: 'every replica tried failed to accept the connection' },
  { kind: 'upstream_connect_failed', flags: ['UF'], message: 'the model server could not be reached' },
  { kind: 'no_healthy_upstream', flags: ['UH'], message: 'no healthy model server is available' },
  { kind: 'upstream_timeout', flags: ['UT', 'SI'], message: 'the model server did not answer in time' },
  { kind: 'overloaded', flags: ['UO'], message: 'too many requests are in flight to the model servers' },
  { kind: 'upstream_reset', flags: ['UR', 'UC', 'LR', 'UPE'], message: 'the model server closed the connection before answering' },
  { kind: 'route_not_found', flags: ['NR'], message: 'no route serves this path' },
];

/** The code a flagged Envoy reply carries to the client; `upstream_error` (the catch-all mapper) when no rule matches. */
export function localReplyKind(flags: number): ErrorKind {
  for (const rule of LOCAL_REPLY_FLAG_RULES) {
    const matches =
      rule.allOf === true ? rule.flags.every((f) => hasResponseFlag(flags, f)) : rule.flags.some((f) => hasResponseFlag(flags, f));
    if (matches) return rule.kind;
  }
  return 'upstream_error';
}
