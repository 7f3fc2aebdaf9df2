// Renders docs/errors.md from the catalog, the Envoy classification tables and the endpoint
// states, so the documentation cannot drift from the code (test/unit/tools/error-docs.test.ts fails
// when the committed file differs). Pure: returns the Markdown text.

import { ENDPOINT_STATES, isRoutable } from '../src/endpoints/model.js';
import { SLOW_REPLICA } from '../src/picker/latency-tracker.js';
import type { EndpointState } from '../src/endpoints/model.js';
import { CANCELLATION_KINDS, CANCELLATIONS, CATALOG, ERROR_KINDS } from '../src/errors/catalog.js';
import type { CatalogEntry } from '../src/errors/catalog.js';
import {
  CODE_DETAIL_KINDS,
  EARLY_UPSTREAM_RESET,
  EXT_PROC_ERROR_PREFIX,
  FLAG_RULES,
  LATE_UPSTREAM_RESET,
  RESET_REASON_KINDS,
  TEXT_RULES,
  VIA_UPSTREAM,
  flagRuleLabel,
} from '../src/errors/envoy-reply.js';
import { RESPONSE_FLAGS } from '../src/errors/envoy-response-flags.js';
import { GatewayError } from '../src/errors/gateway-error.js';
import {
  noReadyReplicaError,
  REPLICA_STATE_KEYS,
  REPORTED_STATES,
  RETRY_AFTER_BY_STATE,
  RETRY_AFTER_NO_REPLICAS,
} from '../src/errors/no-ready-replica.js';
import { ERROR_CODE_HEADER, renderError, renderSseErrorEvent } from '../src/errors/render.js';
import { BREAK_VERDICTS, type BreakVerdict } from '../src/endpoints/replica-probe.js';

/** What each endpoint state means; the compiler insists on one line per state. */
const STATE_MEANINGS: Readonly<Record<EndpointState, string>> = {
  Pending: 'Pod accepted but not running yet: waiting for scheduling or pulling images.',
  Starting: 'Containers are being created or started; the model server is loading.',
  NotReady: 'Running, but the readiness probe fails (or readiness gates are not passed).',
  CrashLoop: 'A container keeps crashing and Kubernetes backs off restarting it (CrashLoopBackOff).',
  Ready: 'Pod has an IP, condition Ready=True and no deletion timestamp.',
  Quarantined:
    'Ready in Kubernetes, but a connect failure, a reset before response or a broken stream was followed by a failed check of the replica (or passive health saw consecutive connect failures/resets); held out until a backoff passes.',
  Terminating: 'Deletion requested (deletionTimestamp set); draining.',
  Gone: 'Deleted; removed from the cache.',
};

/** Transitions of the endpoint state machine as the store applies them. */
const TRANSITIONS: ReadonlyArray<readonly [from: EndpointState | '[*]', to: EndpointState | '[*]', label: string]> = [
  ['[*]', 'Pending', 'pod created'],
  ['Pending', 'Starting', 'scheduled, containers creating'],
  ['Starting', 'NotReady', 'running, probe not passing yet'],
  ['Starting', 'Ready', 'readiness passes'],
  ['NotReady', 'Ready', 'readiness passes'],
  ['Ready', 'NotReady', 'readiness fails'],
  ['Ready', 'Quarantined', 'consecutive connect failures / resets'],
  ['Ready', 'Quarantined', 'stream broke, replica failed its check'],
  ['Ready', 'Quarantined', 'connect failed, replica failed its check'],
  ['Quarantined', 'Ready', 'backoff elapsed'],
  ['Starting', 'CrashLoop', 'container keeps crashing'],
  ['NotReady', 'CrashLoop', 'container keeps crashing'],
  ['CrashLoop', 'Starting', 'restart after back-off'],
  ['Pending', 'Terminating', 'deleted'],
  ['Starting', 'Terminating', 'deleted'],
  ['NotReady', 'Terminating', 'deleted'],
  ['Ready', 'Terminating', 'deleted'],
  ['Quarantined', 'Terminating', 'deleted'],
  ['CrashLoop', 'Terminating', 'deleted'],
  ['Terminating', 'Gone', 'pod removed'],
  ['Gone', '[*]', ''],
];

function cell(text: string): string {
  return text.replace(/\|/g, '\\|').replace(/\n/g, ' ');
}

function code(text: string): string {
  return `\`${text}\``;
}

function statusCell(entry: CatalogEntry): string {
  switch (entry.delivery) {
    case 'response':
      return String(entry.status);
    case 'sse-event':
      return `200 sent; recorded as ${entry.status}`;
    case 'connection-reset':
      return `headers sent; recorded as ${entry.status}`;
    case 'passthrough':
      return `upstream's; recorded as ${entry.status}`;
  }
}

function retryCell(entry: CatalogEntry): string {
  if (!entry.retryable) return 'no';
  return entry.retryAfterSeconds === undefined ? 'yes' : `yes, Retry-After ${entry.retryAfterSeconds} s`;
}

const DELIVERY_WORDS: Readonly<Record<CatalogEntry['delivery'], string>> = {
  response: 'JSON error response',
  'sse-event': 'SSE error event appended',
  'connection-reset': 'client stream reset by Envoy; recorded only',
  passthrough: 'passed through; recorded only',
};

function catalogSection(): string[] {
  const lines = [
    '## Catalog',
    '',
    '| HTTP status | Code | Type | Retryable | When it happens | What to do | Delivery |',
    '| --- | --- | --- | --- | --- | --- | --- |',
  ];
  for (const kind of ERROR_KINDS) {
    const e = CATALOG[kind];
    lines.push(
      `| ${statusCell(e)} | ${code(e.code)} | ${code(e.type)} | ${retryCell(e)} | ${cell(e.cause)} | ${cell(e.action)} | ${DELIVERY_WORDS[e.delivery]} |`,
    );
  }
  return lines;
}

function formatSection(): string[] {
  const sample = noReadyReplicaError('llama-3-8b', [
    { state: 'Starting', reason: 'ContainerCreating' },
    { state: 'Starting', reason: 'ContainerCreating' },
    { state: 'CrashLoop', reason: 'CrashLoopBackOff: back-off 5m0s restarting failed container' },
  ]);
  const rendered = renderError(sample, { requestId: '5f1c2a9e-7d2b-4c1e-9a51-2b8e0c6d4f10' });
  const pretty = JSON.stringify(JSON.parse(rendered.body.toString('utf8')), null, 2);
  const headerLines = rendered.headers.map(([name, value]) => `${name}: ${value}`);
  const event = renderSseErrorEvent(new GatewayError('stream_incomplete', 'The model server ended the stream before it was complete.'));
  return [
    '## Error format',
    '',
    'Every error the gateway produces is an OpenAI-style JSON object, so OpenAI SDKs raise it as an',
    'API error with the right status class. `message`, `type`, `code` and `param` are always there;',
    'extra fields (`model`, `replicas`, `upstream_status`, `request_id`…) sit next to them under `error`.',
    'Internal causes are logged by the gateway and never appear in a response.',
    '',
    '```http',
    `HTTP/1.1 ${rendered.status}`,
    ...headerLines,
    '',
    pretty,
    '```',
    '',
    `The ${code(ERROR_CODE_HEADER)} header repeats the code on every error response, so access logs can be`,
    'searched by code without parsing bodies.',
    '',
    'When a streaming response has already started (status 200 sent) and then ends without its',
    'terminator, the gateway appends one SSE event with the same `error` object — no `event:` line and',
    'no `[DONE]` after it, because OpenAI SDKs raise an error for a data payload with an `error` key:',
    '',
    '```text',
    event.toString('utf8').trimEnd(),
    '```',
    '',
    "A JSON error from the model server itself (for example vLLM's 400 for a too-long prompt) is",
    'passed through untouched: its message is the best explanation there is. Only non-JSON upstream',
    `errors (HTML, plain text) are wrapped, as ${code('upstream_error')}.`,
  ];
}

function flowControlSection(): string[] {
  const after = (kind: 'shed' | 'pool_saturated' | 'queue_timeout'): string => `Retry-After ${CATALOG[kind].retryAfterSeconds ?? 0}`;
  return [
    '## Flow control: when a request waits, and when it gets 429',
    '',
    'With flow control on ([picking.md](picking.md#flow-control-waiting-instead-of-piling-on)), a',
    'request to a saturated pool goes through these states (`src/routing/flow-control.ts`):',
    '',
    '```text',
    'admitted ──(pool has room, nobody waiting)────────────────▶ picked at once (as without flow control)',
    `admitted ──(saturated, priority < 0)──────────────────────▶ 429 shed            ${after('shed')}`,
    `admitted ──(saturated, queue at maxQueued/maxQueuedBytes)─▶ 429 pool_saturated  ${after('pool_saturated')}`,
    'admitted ──(saturated, or others already waiting)─────────▶ queued',
    'queued   ──(a request finished, a scrape, a new view:',
    '            its pool has room and it is its turn)─────────▶ picked then, usual fallbacks',
    'queued   ──(no ready replica any more at that moment)─────▶ 503 no_ready_replica',
    `queued   ──(TTL: ttlSeconds / timedTtlSeconds passed)─────▶ 429 queue_timeout   ${after('queue_timeout')}`,
    'queued   ──(client hung up: ext_proc stream ended)────────▶ gone at once (result cancelled_in_queue)',
    '```',
    '',
    'All three 429s are catalog JSON with `Retry-After`, answered before anything reaches a model',
    'server; `error.pool` names the pool. `llm_extproc_flow_requests_total{event}` counts each',
    'transition.',
    '',
  ];
}

function noReadyReplicaSection(): string[] {
  const lines = [
    `## ${code('no_ready_replica')}: one code, many reasons`,
    '',
    'A model with no Ready replica always answers with the code `no_ready_replica`: to a client every',
    'reason means the same thing — wait and retry — and a single code keeps client code and alerts',
    'simple. The reasons are still there: the message names them, and `error.replicas` counts the',
    "model's replicas per state (always the same keys, zeros included). What differs per reason is how",
    'long to wait, so `Retry-After` is the smallest of the delays of the states present:',
    '',
    '| Replica state | `error.replicas` key | Retry-After |',
    '| --- | --- | --- |',
  ];
  for (const state of REPORTED_STATES) {
    const delay = state === 'Ready' ? '—' : `${RETRY_AFTER_BY_STATE[state]} s`;
    lines.push(`| ${state} | ${code(REPLICA_STATE_KEYS[state])} | ${delay} |`);
  }
  lines.push(`| (no replicas at all) | — | ${RETRY_AFTER_NO_REPLICAS} s |`);
  return lines;
}

function envoySection(): string[] {
  const lines = [
    '## Classifying Envoy local replies',
    '',
    'Envoy answers some requests itself — the replica refused the connection, the cluster has no',
    'healthy host, the timeout fired — and hands those replies to llm-extproc like any response. The',
    'gateway asks Envoy for the `response.code_details` and `response.flags` attributes and classifies',
    'by them; the plain-text body is only a fallback when the attributes are missing. A response whose',
    `details are ${code(VIA_UPSTREAM)} came from the model server and is never reclassified; a local reply`,
    "with details not listed here (another filter's 401/403/429…) keeps its own status and body.",
    '',
    '### By `response.code_details`',
    '',
    '| code_details | Kind | Detail |',
    '| --- | --- | --- |',
  ];
  for (const [details, c] of Object.entries(CODE_DETAIL_KINDS)) lines.push(`| ${code(details)} | ${code(c.kind)} | ${cell(c.detail)} |`);
  lines.push(
    `| ${code(`${EXT_PROC_ERROR_PREFIX}_*`)} (e.g. ${code('ext_proc_error_gRPC_error_14')}) | ${code('gateway_unavailable')} | llm-extproc unreachable, failed or too slow |`,
  );
  lines.push(`| ${code(`${LATE_UPSTREAM_RESET}{…}`)} | ${code('stream_broken')} | reset after headers went out |`);
  lines.push(
    '',
    `${code(`${EARLY_UPSTREAM_RESET}{<reset reason>|<transport failure>}`)} is classified by the reset reason. For a`,
    'connect failure, the transport failure reason gives the detail (`Connection_refused` or errno 111 →',
    '"connection refused", 110 → "connection timed out", 113 → "no route to host", TLS errors → "TLS',
    `handshake failed"), and flag URX (retry limit exceeded: every replica in the override-host list`,
    `was tried) turns it into ${code('all_replicas_failed')}.`,
    '',
    '| Reset reason | Kind | Detail |',
    '| --- | --- | --- |',
  );
  for (const [reason, c] of Object.entries(RESET_REASON_KINDS)) lines.push(`| ${code(reason)} | ${code(c.kind)} | ${cell(c.detail)} |`);
  lines.push(
    '',
    '### By `response.flags` (when code_details is missing or unknown)',
    '',
    "The attribute is a bitmask: flag number *i* of Envoy's `CoreResponseFlag` enum sets bit `1 << i`.",
    'Rules are tried in order; the first whose flags are all set wins.',
    '',
    '| Flags | Bits | Kind | Detail |',
    '| --- | --- | --- | --- |',
  );
  for (const rule of FLAG_RULES) {
    const bits = rule.flags.map((f) => `0x${RESPONSE_FLAGS[f].toString(16)}`).join(' + ');
    lines.push(`| ${cell(flagRuleLabel(rule))} | ${bits} | ${code(rule.kind)} | ${cell(rule.detail)} |`);
  }
  lines.push('', '### By body text (last resort, status 5xx only)', '', '| Envoy text | Kind |', '| --- | --- |');
  for (const rule of TEXT_RULES) lines.push(`| ${code(rule.text)} | ${rule.result} |`);
  lines.push(
    '',
    "Some failures never reach llm-extproc: when llm-extproc itself is down, Envoy's ext_proc filter",
    `answers on its own. The Envoy configurations we ship carry a ${code('local_reply_config')} mapper that`,
    `renders those as ${code('gateway_unavailable')} in the same JSON format.`,
  );
  return lines;
}

/** What each gateway's ext_proc configuration lets llm-extproc see, and so what it can tell users. */
const GATEWAY_VISIBILITY: ReadonlyArray<
  readonly [gateway: string, modes: string, localReplies: string, servedHost: string, jsonAnswers: string]
> = [
  [
    "llm-extproc's own Envoy config (`envoy/*.yaml`)",
    'request BUFFERED, response STREAMED + mode override',
    'exact: `response.code_details` and `response.flags`',
    'exact: `upstream.address`; skipped fallbacks are blamed',
    'Envoy holds them (BUFFERED_PARTIAL) up to its buffer',
  ],
  [
    'Istio (InferencePool)',
    'FULL_DUPLEX_STREAMED both ways, trailers SEND',
    "from Envoy's plain-text body (first 4 KiB); unknown texts become `upstream_error`",
    '`envoy.lb` `x-gateway-destination-endpoint-served` when forwarded, else unknown with fallbacks',
    'held by llm-extproc up to `routing.maxInspectedBodyBytes`',
  ],
  [
    'Envoy AI Gateway (InferencePool, default)',
    'FULL_DUPLEX_STREAMED both ways',
    "from Envoy's plain-text body",
    'our pick (ORIGINAL_DST: exactly one `ip:port`, retries reuse it)',
    'held by llm-extproc up to `routing.maxInspectedBodyBytes`',
  ],
  [
    'Envoy AI Gateway (`processing-body-mode: buffered`)',
    'BUFFERED both ways',
    "from Envoy's plain-text body",
    'our pick (exactly one `ip:port`)',
    'Envoy holds them whole',
  ],
  [
    'kgateway (InferencePool)',
    'FULL_DUPLEX_STREAMED both ways, trailers SEND',
    "from Envoy's plain-text body",
    'our pick (subset LB keyed on exactly one `ip:port`); subset hint honoured',
    'held by llm-extproc up to `routing.maxInspectedBodyBytes`',
  ],
  [
    'plain Envoy Gateway (EnvoyExtensionPolicy)',
    'as configured; with our recommended modes, as our own config',
    'exact when `response.code_details`/`response.flags` are requested, else from the text',
    'exact with `upstream.address`; else known with one address (the header override), unknown otherwise',
    'as configured',
  ],
];

function gatewaysSection(): string[] {
  const lines = [
    '## What each gateway lets llm-extproc know',
    '',
    'The gateway that owns the ext_proc filter decides which body modes and attributes llm-extproc',
    'gets. Every mode gives the same catalog errors; what changes is how precisely a failure is',
    "attributed. Without response attributes, Envoy's own replies (connect failure, no healthy",
    'upstream, timeout) are recognised from their plain-text body, and the replica that answered is',
    'the one the gateway reports back. When nobody reports it, it is known only if Envoy had no other',
    'choice (`routing.destinationFormat: single`, or a single replica picked); otherwise no replica is',
    'credited or blamed for that request (a guess could credit a primary that refused while a fallback',
    "answered), except when Envoy's text says every retry failed. Answers are",
    `replaced with an ext_proc immediate response in every mode (details ${code('llm_extproc_<kind>')}).`,
    '',
    "| Gateway | Body modes | Envoy's local replies | Replica that served | JSON answers validated |",
    '| --- | --- | --- | --- | --- |',
  ];
  for (const row of GATEWAY_VISIBILITY) lines.push(`| ${row.map(cell).join(' | ')} |`);
  lines.push(
    '',
    'Lost without attributes: Envoy flags that have no text of their own (e.g. overflow `UO` is',
    `reported as ${code('upstream_connect_failed')} text), and per-fallback blame inside one request.`,
    'Lost in full duplex for JSON answers above `routing.maxInspectedBodyBytes`: they pass through',
    'as they come and are judged only by their end.',
  );
  return lines;
}

function statesSection(): string[] {
  const lines = [
    '## Endpoint states',
    '',
    'Every replica is in exactly one state; only `Ready` replicas receive traffic. The state names are',
    'the ones in `error.replicas`, in metrics and in logs.',
    '',
    '```mermaid',
    'stateDiagram-v2',
  ];
  for (const [from, to, label] of TRANSITIONS) lines.push(label === '' ? `    ${from} --> ${to}` : `    ${from} --> ${to}: ${label}`);
  lines.push('```', '', '| State | Routable | Meaning |', '| --- | --- | --- |');
  for (const state of ENDPOINT_STATES) {
    const routable = isRoutable({ state, address: '10.0.0.1:8000' }) ? 'yes' : 'no';
    lines.push(`| ${state} | ${routable} | ${cell(STATE_MEANINGS[state])} |`);
  }
  lines.push(
    '',
    `A \`Ready\` replica can also be **demoted** by the picker, reason \`${SLOW_REPLICA}\`: its recent time per output token`,
    "(or, where that is unknown, time to first token) is `picker.latency.outlierFactor` (2) times its pool's median or more.",
    'It stays Ready and routable: it keeps the prompt prefixes it owns and is still a fallback, but takes no other request',
    'first except one probe now and then, or when no other replica has room in its batch, and is reinstated when a probe',
    'answers at pool speed. No client sees an error for it. Its own state machine, `/debug/endpoints` (`load.latency`)',
    'and the metrics are in [picking.md](picking.md#latency-and-slow-replicas).',
  );
  return lines;
}

/** What each verdict of the check after a mid-stream break means; one line per verdict. */
const BREAK_VERDICT_MEANINGS: Readonly<Record<BreakVerdict, readonly [check: string, effect: string]>> = {
  replica_dead: [
    'failed: connection refused or timed out, or the health path did not answer 2xx',
    'quarantined at once (no streak needed), with the usual backoff',
  ],
  replica_alive: [
    'passed: the replica accepts connections (and answers its health path)',
    'stays Ready: something else ended the stream (the model server resetting that one stream, Envoy on its behalf, e.g. a stream idle timeout, or a client that left where no access log tells)',
  ],
  not_checked: ['not run: the replica was no longer Ready (already quarantined, not ready, gone)', 'nothing changes'],
};

function cancellationsSection(): string[] {
  const lines = [
    '## Cancellations: results that are not errors',
    '',
    'A request that ended before its answer was complete, where nothing points at a model server or at',
    'llm-extproc, gets one of these results instead of an error code. No client receives them (whoever',
    'ended the request is gone); they label `llm_extproc_requests_total{result}` and the `request',
    'cancelled` log line (info, throttled like failures), and count in no error series',
    "(`inference_objective_request_error_total`, the error ratio, the chart's alerts). The chart records",
    'their rate as `llm_extproc:requests_cancelled:rate5m`, and the dashboard has a panel for them. Their',
    'series exist at 0 for every served model before its first request (as do those of the codes the',
    "chart's alerts select by name), so Prometheus's `rate()` and `increase()` see the first one",
    '([observability.md](observability.md#results-cancellations-and-alerts)).',
    '',
    '| Result | Title | When |',
    '| --- | --- | --- |',
  ];
  for (const kind of CANCELLATION_KINDS) {
    const entry = CANCELLATIONS[kind];
    lines.push(`| ${code(kind)} | ${cell(entry.title)} | ${cell(entry.cause)} |`);
  }
  return lines;
}

function midStreamSection(): string[] {
  const lines = [
    '## Streams that break mid-way',
    '',
    'When a response stream ends without its end (no `end_of_stream` from Envoy), the ext_proc stream',
    'ends the same way whether the client left or the model server broke off (Envoy closes it when the',
    "HTTP stream is destroyed, for either reason). What tells them apart is Envoy's access-log entry of",
    'that stream: our Envoy configs (and every gateway profile) stream the entries of flagged requests to',
    "llm-extproc's `envoy.service.accesslog.v3.AccessLogService` on the same gRPC port",
    "(docs/gateways.md says how per gateway). A broken stream's result, attempt, log line and span end",
    'wait for its entry, at most 3 s (`src/outcomes/judged-breaks.ts`):',
    '',
    "| Envoy's entry | Result | Replica |",
    '| --- | --- | --- |',
    '| `DC` or `DR` (the downstream ended it), no upstream flag | `cancelled_mid_stream` | no attempt, no check, no error series |',
    '| an upstream flag (`UR`, `UC`, `LR`, `UPE`, `UT`, `SI`, …), status as the upstream sent it | `stream_broken` | failed attempt, replica checked |',
    "| an upstream flag, another status (Envoy still held the headers and answered itself) | that reply's code, e.g. `upstream_reset` | failed attempt, replica checked |",
    '| none within 3 s (with `listen.peerAddress` an entry that reached another replica comes forwarded), or no Envoy streams its access log to us and `listen.peerAddress` is unset | `stream_broken` | failed attempt, replica checked |',
    '',
    '`llm_extproc_midstream_break_signals_total{signal}` counts the breaks by what judged them',
    '(`access_log_client`, `access_log_upstream`, `none`). A replica a failure points at is checked once:',
    'a TCP connect to it, or `GET quarantine.checkPath` when that is set (2xx = alive), within',
    '`quarantine.checkTimeoutSeconds`; breaks of the same replica during a check share it.',
    '`llm_extproc_midstream_breaks_total{verdict}` counts the checks by verdict:',
    '',
    '```mermaid',
    'stateDiagram-v2',
    '    Ready --> Checking: response stream broke',
    '    Checking --> Quarantined: replica_dead',
    '    Checking --> Ready: replica_alive',
    '```',
    '',
    '| Verdict | Check | Effect |',
    '| --- | --- | --- |',
  ];
  for (const verdict of BREAK_VERDICTS) {
    const [check, effect] = BREAK_VERDICT_MEANINGS[verdict];
    lines.push(`| ${code(verdict)} | ${cell(check)} | ${cell(effect)} |`);
  }
  return lines;
}

/**
 * What a client gets when the model server cuts its stream after the headers went out, and why
 * nobody can end it more cleanly: measured under every gateway profile by
 * test/e2e/cut-streams.test.ts, which asserts each claim here.
 */
function cutStreamsSection(): string[] {
  return [
    '## Cut streams: what the client gets',
    '',
    'When the model server resets or closes its connection after the response headers went out, Envoy',
    '1.40 resets the client\'s stream at once ("Prior headers have already been sent" in its debug log),',
    'destroys the filter chain, and only then closes the ext_proc stream. Measured under every gateway',
    'profile (`test/e2e/cut-streams.test.ts`): the processor has heard the response headers and the',
    'chunks that arrived, never a body message marked `end_of_stream`, never trailers. So no ext_proc',
    'reply can end a cut stream with the `stream_broken` SSE error event: not a last `streamed_response`',
    "chunk in FULL_DUPLEX_STREAMED (there is no last chunk), not a body mutation in STREAMED. Envoy's",
    'own settings cannot either: `local_reply_config` mappers apply only while the headers are still',
    'held (that reply is the `upstream_reset` JSON), and `stream_error_on_invalid_http_message`, HTTP/1.1',
    'or HTTP/2 downstream only change how the reset looks. The client sees a cut; what it raises:',
    '',
    '| Client | What reaches it | What it raises |',
    '| --- | --- | --- |',
    "| HTTP/1.1 | status 200, the events sent so far, then the connection closes without the chunked terminator, about 1 s after the cut (Envoy's `delayed_close_timeout`, 1 s by default) | a read error (Node: `aborted` / `ECONNRESET`) |",
    '| HTTP/2 | status 200, the events sent so far, then `RST_STREAM` `INTERNAL_ERROR`, at once | a stream error (Node: `ERR_HTTP2_STREAM_ERROR`) |',
    "| openai Node SDK 6.49 (fetch, HTTP/1.1) | as HTTP/1.1 | `TypeError: terminated` (undici's), **not** an `OpenAI.APIError`: catch it around the stream's iteration |",
    '| openai Python SDK 3.60 (httpx, HTTP/1.1) | as HTTP/1.1 | `openai.APIConnectionError` ("Connection error.", an `openai.APIError`) raised from httpx\'s `RemoteProtocolError` (incomplete chunked read) |',
    '',
    'Under a gateway that buffers whole responses (Envoy AI Gateway with',
    '`processing-body-mode: buffered`) nothing has reached the client when the model server cuts:',
    "Envoy answers 502 itself (`upstream_reset` JSON under our configs; Envoy's plain text under the",
    "gateway's own). Either way a stream without its terminator (`data: [DONE]`, `response.completed`)",
    'is partial: keep what arrived if useful, and retry.',
  ];
}

function deadReplicaSection(): string[] {
  return [
    '## A dead replica costs at most one request',
    '',
    'An attempt that cannot connect, or is reset before any response, gets the same check as a broken',
    'stream, at once: a replica that fails it is quarantined without waiting for',
    '`quarantine.consecutiveFailures` (`llm_extproc_failed_connect_checks_total{verdict}`, verdicts as',
    'above). A replica that refused once but passes its check stays Ready; the streak still counts,',
    'so one that keeps failing requests while passing checks (flapping) is quarantined after',
    '`consecutiveFailures`. What the client sees of the one failed attempt depends on the gateway:',
    '',
    '| Gateway (destination format) | The failed attempt | The requests after it |',
    '| --- | --- | --- |',
    '| our Envoy config (`list`, with a retry policy onto the fallbacks) | Envoy retries it on the next replica we listed: no failure reaches the client | go elsewhere once the check quarantines the replica |',
    '| Envoy AI Gateway (`single`: ORIGINAL_DST on one address) | fails: `503 upstream_connect_failed` JSON (nothing to fall back to) | go elsewhere |',
    '| kgateway (`single`: a subset of one exact address) | fails: `503 upstream_connect_failed` JSON | go elsewhere |',
    '| Envoy Gateway (`list`, but no retry policy) | fails: `503 upstream_connect_failed` JSON | go elsewhere |',
  ];
}

export function renderErrorDocs(): string {
  const lines = [
    '# Errors',
    '',
    '<!-- Generated from src/errors/*.ts by `npm run docs:errors`. Do not edit by hand. -->',
    '',
    'What a client can receive from llm-extproc, why, and what to do about it.',
    '',
    ...formatSection(),
    '',
    ...catalogSection(),
    '',
    ...flowControlSection(),
    ...noReadyReplicaSection(),
    '',
    ...envoySection(),
    '',
    ...gatewaysSection(),
    '',
    ...statesSection(),
    '',
    ...cancellationsSection(),
    '',
    ...midStreamSection(),
    '',
    ...cutStreamsSection(),
    '',
    ...deadReplicaSection(),
  ];
  return `${lines.join('\n')}\n`;
}

/** Transitions shown in the diagram (exported for tests that check every state is reachable). */
export const ENDPOINT_TRANSITIONS = TRANSITIONS;
