// Cut streams, measured through the real Envoy 1.40 (docs/errors.md, "Cut streams"): a model server
// that resets (or closes) its connection after the response started, and a client that hangs up
// mid-stream. Two questions:
// 1. What does an external processor hear? Under every gateway profile a recording ext_proc server
//    (test/support/recording-processor.ts) sees the same thing in both cases: the response headers
//    and the chunks that arrived, then the end of its gRPC stream, never a body message marked
//    end_of_stream and never trailers. Envoy destroys the filter chain when it resets the client's
//    stream and only then closes the ext_proc stream, so no ext_proc reply can end a cut stream
//    with an SSE error event, and the stream's end does not tell a departed client from a dead
//    replica (llm-extproc checks the replica instead).
// 2. What does the client get? HTTP/1.1: status 200, the events that were sent, then the
//    connection closed without the chunked terminator; HTTP/2: RST_STREAM INTERNAL_ERROR. The
//    official openai Node SDK raises `TypeError: terminated` (undici's), not an APIError; the
//    Python SDK an `APIConnectionError` caused by httpx's RemoteProtocolError.

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { connect as connectHttp2, constants as http2 } from 'node:http2';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { repoRoot } from '../../scripts/repo-root.js';
import OpenAI from 'openai';
import { stringify as toYaml } from 'yaml';
import { GATEWAY_PROFILE_NAMES, GATEWAY_PROFILES } from '../../tools/envoy-config/gateway-profiles.js';
import { startEnvoy } from '../support/envoy-process.js';
import type { RunningEnvoy } from '../support/envoy-process.js';
import { startGateway } from '../support/gateway.js';
import type { Gateway } from '../support/gateway.js';
import { send } from '../support/http-client.js';
import type { ClientResponse } from '../support/http-client.js';
import { startModelServer } from '../support/model-server.js';
import type { ModelServer } from '../support/model-server.js';
import { startRecordingExtProc } from '../support/recording-processor.js';
import type { HeardStream, RecordingExtProc } from '../support/recording-processor.js';
import { waitUntil } from '../support/wait-until.js';

const run = promisify(execFile);
const CHAT = '/v1/chat/completions';
const EVENTS_BEFORE_CUT = 3;
const streamRequest = { model: 'm', stream: true, messages: [{ role: 'user', content: 'tell me a story' }] };

/** SSE events (blank-line separated) in what the client received so far. */
const eventsIn = (text: string): number => text.split('\n\n').length - 1;

type Cut = 'client hangs up' | 'model server resets (RST)' | 'model server closes (FIN)';
const CUTS: readonly Cut[] = ['client hangs up', 'model server resets (RST)', 'model server closes (FIN)'];

/**
 * One streamed request over HTTP/1.1 whose model server stalls after EVENTS_BEFORE_CUT events;
 * once the client has them, the cut happens: the client hangs up, or the model server's connection
 * is reset or closed.
 */
function cutStream(port: number, model: ModelServer, cut: Cut): Promise<ClientResponse> {
  model.nextBehavior({ kind: 'hang-after-headers', afterEvents: EVENTS_BEFORE_CUT });
  const hangUp = new AbortController();
  let text = '';
  let cutDone = false;
  return send(port, {
    path: CHAT,
    body: streamRequest,
    signal: hangUp.signal,
    onData: (chunk) => {
      text += chunk.toString();
      if (cutDone || eventsIn(text) < EVENTS_BEFORE_CUT) return;
      cutDone = true;
      if (cut === 'client hangs up') hangUp.abort();
      else model.resetConnections(cut === 'model server resets (RST)' ? 'rst' : 'fin');
    },
  });
}

const CLIENT_LEFT = 'DC downstream_remote_disconnect';
/** An HTTP/1.1 model server that cut its chunked body, by reset or by close alike. */
const MODEL_SERVER_CUT = 'UPE upstream_reset_after_response_started{protocol_error}';

/** The gateway's bootstrap plus a file access log of each request's status, flags and details. */
function withAccessLog(config: Record<string, unknown>, path: string): Record<string, unknown> {
  const copy = structuredClone(config) as {
    static_resources: { listeners: Array<{ filter_chains: Array<{ filters: Array<{ typed_config: Record<string, unknown> }> }> }> };
  };
  const hcm = copy.static_resources.listeners[0]?.filter_chains[0]?.filters[0]?.typed_config;
  assert.ok(hcm !== undefined, 'the profile has one listener with an HTTP connection manager');
  hcm.access_log = [
    {
      name: 'envoy.access_loggers.file',
      typed_config: {
        '@type': 'type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog',
        path,
        log_format: { text_format_source: { inline_string: '%RESPONSE_CODE% %RESPONSE_FLAGS% %RESPONSE_CODE_DETAILS%\n' } },
      },
    },
  ];
  return copy;
}

/** The access log's line for the index-th request (Envoy flushes the file about once a second). */
async function accessLogLine(path: string, index: number): Promise<string> {
  return waitUntil(
    async () => {
      const lines = (await readFile(path, 'utf8').catch(() => '')).split('\n').filter((line) => line !== '');
      return lines[index];
    },
    { description: `access log line ${index}` },
  );
}

async function streamEnded(recorder: RecordingExtProc, index: number): Promise<HeardStream> {
  return waitUntil(() => (recorder.streams[index]?.end === undefined ? undefined : recorder.streams[index]), {
    description: `ext_proc stream ${index} to end`,
  });
}

/** What the processor heard of the response: every response message's kind, `+eos` when marked end_of_stream. */
function responseMessages(heard: HeardStream): string[] {
  return heard.messages.filter((m) => m.kind.startsWith('response')).map((m) => `${m.kind}${m.endOfStream ? '+eos' : ''}`);
}

describe('cut streams: what ext_proc hears, per gateway profile (recording processor, real Envoy)', () => {
  for (const name of GATEWAY_PROFILE_NAMES) {
    describe(name, () => {
      const profile = GATEWAY_PROFILES[name];
      let model: ModelServer;
      let recorder: RecordingExtProc;
      let envoy: RunningEnvoy;
      let accessLog: string;
      before(async () => {
        model = await startModelServer({ id: 'm', models: ['m'] });
        recorder = await startRecordingExtProc(model.address, { tls: profile.picker.tls === 'required' });
        const loopback = { address: '127.0.0.1', port: 0 };
        const config = profile.render({
          listener: loopback,
          admin: loopback,
          extProc: recorder.address,
          pickerTls: profile.picker.tls === 'required' ? { kind: 'unverified' } : { kind: 'plaintext' },
          backends: [model.address],
          istioPickerAuthority: 'llm-extproc.llm-extproc.svc:9002',
        });
        accessLog = join(await mkdtemp(join(tmpdir(), 'cut-streams-')), 'access.log');
        envoy = await startEnvoy({ configYaml: toYaml(withAccessLog(config, accessLog)), name: `cut-${name}` });
      });
      after(async () => {
        await rm(dirname(accessLog), { recursive: true, force: true });
        await envoy?.stop();
        await recorder?.close();
        await model?.close();
      });

      if (profile.responseBodyMode === 'BUFFERED') {
        it('a cut answer never reaches the client: Envoy answers 502 itself; ext_proc heard only the headers', async () => {
          // Envoy holds the whole body for the processor, so the client has seen nothing when the
          // model server resets; the reset is the server's own, after its events were written.
          model.nextBehavior({ kind: 'reset-mid-stream', afterEvents: EVENTS_BEFORE_CUT });
          const index = recorder.streams.length;
          const response = await send(envoy.listenerPort('llm_gateway'), { path: CHAT, body: streamRequest });
          assert.equal(response.status, 502);
          assert.equal(eventsIn(response.text()), 0, 'no event reached the client');
          const heard = await streamEnded(recorder, index);
          assert.deepEqual(responseMessages(heard), ['response_headers']);
          assert.equal(heard.end?.kind, 'error', 'the stream ends with a reset, not a half-close');
          assert.equal(await accessLogLine(accessLog, index), `502 ${MODEL_SERVER_CUT}`);
        });
        return;
      }

      // Our Envoy config sets `ext_proc_graceful_grpc_close` (Envoy half-closes); the gateways' configs
      // do not, and Envoy then resets the stream (RST_STREAM INTERNAL_ERROR).
      const expectedEnd = name === 'ours' ? 'half-closed' : 'error';
      for (const cut of CUTS) {
        it(`${cut} after ${EVENTS_BEFORE_CUT} events: the chunks that came, no end_of_stream, no trailers, then the stream ends (${expectedEnd})`, async () => {
          const index = recorder.streams.length;
          const response = await cutStream(envoy.listenerPort('llm_gateway'), model, cut);
          assert.equal(response.status, 200);
          assert.ok(eventsIn(response.text()) >= EVENTS_BEFORE_CUT, response.text());
          assert.doesNotMatch(response.text(), /\[DONE\]|"error"/, 'neither the terminator nor an error event');
          assert.notEqual(response.error, undefined, 'the client sees the connection break');
          const heard = await streamEnded(recorder, index);
          const messages = responseMessages(heard);
          assert.equal(messages[0], 'response_headers');
          assert.ok(messages.length >= 2, `a body chunk reached the processor: ${messages.join(', ')}`);
          assert.deepEqual(
            messages.filter((m) => m.endsWith('+eos') || m === 'response_trailers'),
            [],
            'nothing marks the end of the response: there is no last chunk to append an error event to',
          );
          assert.equal(heard.end?.kind, expectedEnd, 'the same end whether the client or the model server left');
          // Attributes (our config asks for them) come with the response headers only, while
          // nothing has gone wrong yet: Envoy's later flags (DC, UPE) never reach the processor.
          const withAttributes = heard.messages.filter((m) => m.attributes !== undefined);
          if (profile.responseAttributes) {
            assert.deepEqual(
              withAttributes.map((m) => [m.kind, m.attributes?.['response.flags'], m.attributes?.['response.code_details']]),
              [['response_headers', 0, 'via_upstream']],
            );
          } else assert.deepEqual(withAttributes, []);
          // Envoy knows which side left, in its access log only (where ext_proc cannot read it).
          assert.equal(await accessLogLine(accessLog, index), `200 ${cut === 'client hangs up' ? CLIENT_LEFT : MODEL_SERVER_CUT}`);
        });
      }
    });
  }
});

describe('cut streams: what the client gets (llm-extproc behind our Envoy config)', () => {
  let model: ModelServer;
  let gateway: Gateway;
  before(async () => {
    model = await startModelServer({ id: 'm', models: ['m'] });
    gateway = await startGateway({
      pools: [{ name: 'p', models: ['m'], endpoints: [{ address: model.address }] }],
      // Every cut here is on purpose: the replica must stay routable for the next case.
      configYaml: 'quarantine:\n  consecutiveFailures: 1000\n',
    });
  });
  after(async () => {
    await gateway?.stop();
    await model?.close();
  });

  it('HTTP/1.1: 200, the events sent so far, then the connection closes without the chunked terminator', async () => {
    const response = await cutStream(gateway.port, model, 'model server resets (RST)');
    assert.equal(response.status, 200);
    assert.equal(response.headers['content-type'], 'text/event-stream');
    assert.equal(eventsIn(response.text()), EVENTS_BEFORE_CUT);
    assert.match(String(response.error?.message), /aborted|ECONNRESET|socket hang up/);
  });

  it('HTTP/2: 200, the events sent so far, then RST_STREAM INTERNAL_ERROR', async () => {
    model.nextBehavior({ kind: 'hang-after-headers', afterEvents: EVENTS_BEFORE_CUT });
    const session = connectHttp2(`http://127.0.0.1:${gateway.port}`);
    try {
      const outcome = await new Promise<{ status: number; events: number; rstCode: number | undefined }>((resolve) => {
        const stream = session.request({ ':method': 'POST', ':path': CHAT, 'content-type': 'application/json' });
        let status = 0;
        let text = '';
        stream.on('response', (headers) => (status = Number(headers[':status'])));
        stream.on('data', (chunk: Buffer) => {
          text += chunk.toString();
          if (eventsIn(text) === EVENTS_BEFORE_CUT) model.resetConnections('rst');
        });
        stream.on('error', () => undefined);
        stream.on('close', () => resolve({ status, events: eventsIn(text), rstCode: stream.rstCode }));
        stream.end(JSON.stringify(streamRequest));
      });
      assert.deepEqual(outcome, { status: 200, events: EVENTS_BEFORE_CUT, rstCode: http2.NGHTTP2_INTERNAL_ERROR });
    } finally {
      session.destroy();
    }
  });

  it('the official openai Node SDK: the stream raises TypeError "terminated", not an APIError', async () => {
    model.nextBehavior({ kind: 'hang-after-headers', afterEvents: EVENTS_BEFORE_CUT });
    const client = new OpenAI({ baseURL: `http://127.0.0.1:${gateway.port}/v1`, apiKey: 'unused', maxRetries: 0 });
    const stream = await client.chat.completions.create({ model: 'm', stream: true, messages: [{ role: 'user', content: 'hi' }] });
    let chunks = 0;
    const failure = await (async () => {
      try {
        for await (const chunk of stream) {
          assert.equal(chunk.object, 'chat.completion.chunk');
          if (++chunks === EVENTS_BEFORE_CUT) model.resetConnections('rst');
        }
      } catch (err) {
        return err;
      }
      return undefined;
    })();
    assert.equal(chunks, EVENTS_BEFORE_CUT);
    assert.ok(failure instanceof TypeError, `raised ${String(failure)}`);
    assert.equal(failure.message, 'terminated');
    assert.ok(!(failure instanceof OpenAI.APIError), 'not an APIError: the SDK never saw an error response');
  });

  it("the official openai Python SDK: the stream raises APIConnectionError from httpx's RemoteProtocolError", async () => {
    // scripts/install-openai-python.mjs: a venv with the pinned SDK in the tools cache (or $OPENAI_PYTHON).
    const installed = await run(process.execPath, [join(repoRoot(), 'scripts', 'install-openai-python.mjs')]);
    const outcome = await pythonClientOutcome(installed.stdout.trim(), gateway.port, model);
    // openai-python wraps the transport's error: an APIConnectionError (an APIError subclass there).
    assert.deepEqual(outcome, { chunks: EVENTS_BEFORE_CUT, raised: 'openai.APIConnectionError from httpx2.RemoteProtocolError' });
  });
});

/**
 * Streams with the Python SDK, which prints one line per chunk; once it has printed
 * EVENTS_BEFORE_CUT, the model server's connection is reset. Returns the chunks and what it raised.
 */
async function pythonClientOutcome(python: string, port: number, model: ModelServer): Promise<{ chunks: number; raised: string }> {
  model.nextBehavior({ kind: 'hang-after-headers', afterEvents: EVENTS_BEFORE_CUT });
  const script = [
    'import sys, openai',
    `client = openai.OpenAI(base_url="http://127.0.0.1:${port}/v1", api_key="unused", max_retries=0)`,
    'stream = client.chat.completions.create(model="m", stream=True, messages=[{"role": "user", "content": "hi"}])',
    'try:',
    '    for chunk in stream:',
    '        print("chunk", flush=True)',
    'except BaseException as err:',
    '    name = lambda e: type(e).__module__.split(".")[0] + "." + type(e).__name__',
    '    print("raised", name(err), "from", name(err.__cause__), flush=True)',
  ].join('\n');
  const child = execFile(python, ['-c', script]);
  let out = '';
  child.stdout?.on('data', (data: Buffer) => {
    out += data.toString();
    if (out.split('\n').filter((line) => line === 'chunk').length === EVENTS_BEFORE_CUT) model.resetConnections('rst');
  });
  await once(child, 'exit');
  const lines = out.trim().split('\n');
  return { chunks: lines.filter((line) => line === 'chunk').length, raised: lines.at(-1)?.replace(/^raised /, '') ?? '' };
}
