// What Istio tells the endpoint picker about the host that really served a request, observed on a
// real Envoy under the Istio profile: the pool cluster's override_host policy writes the chosen
// host into the stream's dynamic metadata (`selected_host_key` → `envoy.lb` /
// `x-gateway-destination-endpoint-served`), and the listener-level ext_proc filter forwards the
// `envoy.lb` namespace (`metadata_options.forwarding_namespaces`) in every ProcessingRequest's
// `metadata_context`. A scripted full-duplex processor records exactly what arrives.

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { pino } from 'pino';
import { stringify as toYaml } from 'yaml';
import type { GrpcTransport } from '../../src/config/config.js';
import { GRPC_TRANSPORTS } from '../../src/config/schema.js';
import { GATEWAY_PROFILES, SERVED_ENDPOINT_KEY } from '../../tools/envoy-config/gateway-profiles.js';
import { startExtProcServer } from '../../src/extproc/server.js';
import type { RunningGrpcServer } from '../../src/grpc/server.js';
import type { ProcessingRequest, ProcessingResponse, ProtoStruct } from '../../src/extproc/messages.js';
import type { StreamProcessor } from '../../src/extproc/stream-processor.js';
import { DESTINATION_HEADER, DESTINATION_METADATA_NAMESPACE } from '../../src/extproc/protocol-names.js';
import { metadataNamespaces } from '../../src/extproc/message-fields.js';
import { startEnvoy, type RunningEnvoy } from '../support/envoy-process.js';
import { send } from '../support/http-client.js';
import { startModelServer, type ModelServer } from '../support/model-server.js';

type Kind = NonNullable<ProcessingRequest['request']>;

interface Seen {
  readonly kind: Kind;
  /** `metadata_context.filter_metadata['envoy.lb']` as plain strings, when present. */
  readonly envoyLb: Record<string, string> | undefined;
}

interface WithMetadata {
  metadata_context?: { filter_metadata?: Record<string, ProtoStruct> };
}

function plain(struct: ProtoStruct | undefined): Record<string, string> | undefined {
  if (struct === undefined) return undefined;
  return Object.fromEntries(Object.entries(struct.fields ?? {}).map(([k, v]) => [k, v.stringValue ?? JSON.stringify(v)]));
}

/** The least a FULL_DUPLEX_STREAMED processor must answer: the pick on request headers, bodies streamed back as they came. */
function scriptedReply(request: ProcessingRequest, pick: string): ProcessingResponse[] {
  const streamed = (body: Buffer | undefined, end: boolean | undefined): unknown => ({
    response: { body_mutation: { streamed_response: { body: body ?? Buffer.alloc(0), end_of_stream: end === true } } },
  });
  switch (request.request) {
    case 'request_headers':
      return [
        {
          request_headers: {
            response: {
              header_mutation: {
                set_headers: [{ header: { key: DESTINATION_HEADER, raw_value: Buffer.from(pick) }, append: { value: false } }],
              },
            },
          },
          dynamic_metadata: metadataNamespaces({ [DESTINATION_METADATA_NAMESPACE]: { [DESTINATION_HEADER]: pick } }),
        },
      ];
    case 'request_body':
      return [{ request_body: streamed(request.request_body?.body, request.request_body?.end_of_stream) } as ProcessingResponse];
    case 'response_headers':
      return [{ response_headers: {} }];
    case 'response_body':
      return [{ response_body: streamed(request.response_body?.body, request.response_body?.end_of_stream) } as ProcessingResponse];
    case 'request_trailers':
      return [{ request_trailers: {} }];
    case 'response_trailers':
      return [{ response_trailers: {} }];
    default:
      return [];
  }
}

interface IstioBed {
  readonly model: ModelServer;
  readonly grpc: RunningGrpcServer;
  readonly envoy: RunningEnvoy;
  readonly stop: () => Promise<void>;
}

/**
 * A model server, llm-extproc's gRPC server with `processor` on `transport`, and a real Envoy
 * rendered from the Istio profile in front of them (`authority`: the EnvoyFilter patch, or none).
 */
async function startIstioBed(
  name: string,
  options: { transport?: GrpcTransport; authority?: string; processor: (model: ModelServer) => StreamProcessor },
): Promise<IstioBed> {
  const model = await startModelServer({ id: name, models: ['m'] });
  const grpc = await startExtProcServer({
    address: '127.0.0.1:0',
    ...(options.transport === undefined ? {} : { transport: options.transport }),
    health: { isServing: () => true, onChange: () => () => {} },
    logger: pino({ level: 'silent' }),
    processorFactory: () => options.processor(model),
  });
  const config = GATEWAY_PROFILES.istio.render({
    listener: { address: '127.0.0.1', port: 0 },
    admin: { address: '127.0.0.1', port: 0 },
    extProc: grpc.address,
    pickerTls: { kind: 'plaintext' },
    backends: [model.address],
    ...(options.authority === undefined ? {} : { istioPickerAuthority: options.authority }),
  });
  const envoy = await startEnvoy({ configYaml: toYaml(config), name });
  return {
    model,
    grpc,
    envoy,
    stop: async () => {
      await envoy.stop();
      await grpc.shutdown(0);
      await model.close();
    },
  };
}

void describe('Istio: what the picker receives about the served host', () => {
  let bed: IstioBed;
  const streams: Seen[][] = [];

  before(async () => {
    bed = await startIstioBed('istio-served', {
      authority: 'llm-extproc.llm-extproc.svc:9002',
      processor: (model) => {
        const seen: Seen[] = [];
        streams.push(seen);
        return {
          process: (request) => {
            const metadata = (request as WithMetadata).metadata_context?.filter_metadata;
            seen.push({ kind: request.request!, envoyLb: plain(metadata?.[DESTINATION_METADATA_NAMESPACE]) });
            return scriptedReply(request, model.address);
          },
          finish: () => {},
        };
      },
    });
  });

  after(async () => {
    await bed?.stop();
  });

  void it('request messages carry no envoy.lb; response messages carry our pick and the served host', async () => {
    const { envoy, model } = bed;
    const response = await send(envoy.listenerPort('llm_gateway'), {
      path: '/v1/chat/completions',
      body: { model: 'm', messages: [{ role: 'user', content: 'hi' }] },
    });
    assert.equal(response.status, 200, response.text());
    assert.equal(model.requests.length, 1);
    const seen = streams.at(-1)!;
    const kinds = [...new Set(seen.map((s) => s.kind))];
    assert.deepEqual(kinds.slice(0, 2), ['request_headers', 'request_body']);
    assert.ok(kinds.includes('response_headers') && kinds.includes('response_body'));
    for (const message of seen.filter((s) => s.kind === 'request_headers')) {
      assert.equal(message.envoyLb, undefined, 'nothing in envoy.lb before the picker answered');
    }
    const expected = { [DESTINATION_HEADER]: model.address, [SERVED_ENDPOINT_KEY]: model.address };
    for (const message of seen.filter(
      (s) => s.kind === 'response_headers' || s.kind === 'response_body' || s.kind === 'response_trailers',
    )) {
      assert.deepEqual(message.envoyLb, expected, `${message.kind}: envoy.lb forwarded with the pick and the served host`);
    }
  });
});

void describe("Istio's default picker authority (the cluster name, `outbound|…`)", () => {
  // Our own HTTP/2 accepts any authority; nghttp2 (node:http2, and grpc-js on it) refuses the `|`
  // with RST_STREAM PROTOCOL_ERROR, so there the EnvoyFilter patch in docs/gateways.md is required.
  for (const transport of GRPC_TRANSPORTS) {
    const served = transport === 'native';
    void it(`${transport}: ${served ? 'served without the EnvoyFilter patch' : 'refused: without the EnvoyFilter patch every request fails closed'}`, async () => {
      const opened: number[] = [];
      const { envoy, model, stop } = await startIstioBed(`istio-authority-${transport}`, {
        transport,
        processor: (served) => {
          opened.push(1);
          return { process: (request) => scriptedReply(request, served.address), finish: () => {} };
        },
      });
      try {
        const response = await send(envoy.listenerPort('llm_gateway'), {
          path: '/v1/chat/completions',
          body: { model: 'm', messages: [] },
        });
        if (served) {
          assert.equal(response.status, 200, response.text());
          assert.equal(opened.length, 1, 'the ext_proc stream reached llm-extproc');
          assert.equal(model.requests.length, 1, 'routed to the picked endpoint');
        } else {
          assert.equal(response.status, 500, response.text());
          assert.equal(opened.length, 0, 'no ext_proc stream ever reached llm-extproc');
          assert.equal(model.requests.length, 0, 'fail closed: nothing routed');
        }
      } finally {
        await stop();
      }
    });
  }
});
