// `npm run bench:codec`: CPU time per message of the hot-path codec (src/extproc/codec/) against
// the reflection codec (protobufjs fromObject/encode, decode/toObject through @grpc/proto-loader)
// for the messages that dominate an ext_proc stream. CPU time (process.cpuUsage), not wall time,
// so the ratio holds up on a shared machine. Flags: --iterations N (default 100000).

import { decodeProcessingRequest } from '../src/extproc/codec/decode-request.js';
import { encodeProcessingResponse } from '../src/extproc/codec/encode-response.js';
import { Writer } from '../src/grpc/protobuf-wire.js';
import type { ProcessingResponse } from '../src/extproc/messages.js';
import { loadWireDefinitions } from '../test/support/proto-definitions.js';
import { parseScriptOptions } from './script-options.js';

const { values } = parseScriptOptions(import.meta.url, { options: { iterations: { type: 'string', default: '100000' } } });
const iterations = Number(values.iterations);

const wire = loadWireDefinitions();
interface ReflectionType {
  serialize(value: object): Buffer;
  deserialize(bytes: Buffer): object;
}
const requestType = wire.packageDefinition['envoy.service.ext_proc.v3.ProcessingRequest'] as unknown as ReflectionType;
const responseType = wire.packageDefinition['envoy.service.ext_proc.v3.ProcessingResponse'] as unknown as ReflectionType;

const header = (key: string, value: string) => ({ key, raw_value: Buffer.from(value) });
const requests: Record<string, Buffer> = {
  'request_headers (14 headers + attributes)': requestType.serialize({
    request_headers: {
      headers: {
        headers: [
          header(':authority', 'gateway.example'),
          header(':path', '/v1/chat/completions'),
          header(':method', 'POST'),
          header(':scheme', 'http'),
          header('content-type', 'application/json'),
          header('content-length', '113'),
          header('user-agent', 'bench/1.0'),
          header('accept', '*/*'),
          header('x-forwarded-proto', 'http'),
          header('x-request-id', '3f1c2b9e-7a4d-4e8b-9c1a-5d6e7f809a1b'),
          header('x-envoy-expected-rq-timeout-ms', '300000'),
          header('authorization', 'Bearer sk-0123456789abcdef'),
          header('accept-encoding', 'gzip, deflate'),
          header('connection', 'keep-alive'),
        ],
      },
    },
    attributes: {
      'envoy.filters.http.ext_proc': { fields: { 'request.id': { stringValue: '3f1c2b9e' }, 'xds.route_name': { stringValue: 'llm' } } },
    },
    protocol_config: { request_body_mode: 'BUFFERED', response_body_mode: 'STREAMED' },
  }),
  'request_body (113 B JSON, end)': requestType.serialize({
    request_body: {
      body: Buffer.from(
        JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'Say hello in one short sentence.' }], max_tokens: 32 }),
      ),
      end_of_stream: true,
    },
  }),
  'response_body (one SSE chunk)': requestType.serialize({
    response_body: {
      body: Buffer.from('data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hello"}}]}\n\n'),
      end_of_stream: false,
    },
  }),
};
const replies: Record<string, ProcessingResponse> = {
  'request_body reply (routing headers + metadata)': {
    request_body: {
      response: {
        header_mutation: {
          set_headers: [
            {
              header: { key: 'x-gateway-destination-endpoint', raw_value: Buffer.from('10.0.0.5:8000,10.0.0.6:8000') },
              append: { value: false },
            },
          ],
        },
        clear_route_cache: true,
      },
    },
    dynamic_metadata: {
      fields: {
        'envoy.lb': { structValue: { fields: { 'x-gateway-destination-endpoint': { stringValue: '10.0.0.5:8000,10.0.0.6:8000' } } } },
      },
    },
  },
  'response_headers reply (mode override)': { response_headers: { response: {} }, mode_override: { response_body_mode: 'STREAMED' } },
  'response_body reply (streamed_response chunk)': {
    response_body: { response: { body_mutation: { streamed_response: { body: Buffer.alloc(120, 0x61), end_of_stream: false } } } },
  },
};

function cpuNsPerOp(fn: () => void): number {
  for (let i = 0; i < Math.min(20_000, iterations); i++) fn();
  const start = process.cpuUsage();
  for (let i = 0; i < iterations; i++) fn();
  const used = process.cpuUsage(start);
  return ((used.user + used.system) * 1000) / iterations;
}

const rows: string[] = ['| message | reflection ns/op (CPU) | hand-written ns/op (CPU) | ratio |', '| --- | ---: | ---: | ---: |'];
const row = (name: string, reflection: number, fast: number) =>
  rows.push(`| ${name} | ${reflection.toFixed(0)} | ${fast.toFixed(0)} | ${(reflection / fast).toFixed(1)}× |`);
for (const [name, bytes] of Object.entries(requests))
  row(
    `decode ${name}`,
    cpuNsPerOp(() => requestType.deserialize(bytes)),
    cpuNsPerOp(() => decodeProcessingRequest(bytes)),
  );
const writer = new Writer();
for (const [name, reply] of Object.entries(replies)) {
  row(
    `encode ${name}`,
    cpuNsPerOp(() => responseType.serialize(reply)),
    cpuNsPerOp(() => {
      writer.reset();
      encodeProcessingResponse(writer, reply);
      writer.finish();
    }),
  );
}
process.stdout.write(`Node ${process.version}, ${iterations} iterations per cell\n\n${rows.join('\n')}\n`);
