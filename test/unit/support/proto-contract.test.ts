// Our hand-written protos must stay wire-identical to Envoy's. The expected numbers below are
// facts read from Envoy's API (envoyproxy/data-plane-api 84e84367f256, 2026-01-29) and gRPC's
// health.proto; this test reads them back from the descriptors proto-loader built.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { AnyDefinition } from '@grpc/proto-loader';
import { EXT_PROC_SERVICE_NAME, HEALTH_SERVICE_NAME, PROTO_LOADER_OPTIONS, loadWireDefinitions } from '../../support/proto-definitions.js';

const wire = loadWireDefinitions();
const pkg = wire.packageDefinition;

interface FieldInfo {
  name: string;
  number: number;
  label: string;
  type: string;
  typeName: string;
}

interface MessageInfo {
  fields: Map<string, FieldInfo>;
  nestedTypes: unknown[];
  enums: Map<string, Map<string, number>>;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null;
}

function list(value: unknown, what: string): Record<string, unknown>[] {
  assert.ok(Array.isArray(value), `${what} is a list`);
  return value.map((item, i) => {
    assert.ok(isRecord(item), `${what}[${i}] is an object`);
    return item;
  });
}

function str(value: unknown): string {
  assert.equal(typeof value, 'string');
  return value as string;
}

function num(value: unknown): number {
  assert.equal(typeof value, 'number');
  return value as number;
}

function definitionType(name: string, format: string): Record<string, unknown> {
  const def: unknown = pkg[name];
  assert.ok(isRecord(def) && def.format === format, `${name} is loaded as ${format}`);
  assert.ok(isRecord(def.type));
  return def.type;
}

function enumValues(descriptor: Record<string, unknown>): Map<string, number> {
  return new Map(list(descriptor.value, 'enum values').map((v) => [str(v.name), num(v.number)]));
}

function message(name: string): MessageInfo {
  const type = definitionType(name, 'Protocol Buffer 3 DescriptorProto');
  const fields = new Map(
    list(type.field, `${name}.field`).map((f) => {
      const info: FieldInfo = {
        name: str(f.name),
        number: num(f.number),
        label: str(f.label),
        type: str(f.type),
        typeName: str(f.typeName),
      };
      return [info.name, info];
    }),
  );
  const enums = new Map(list(type.enumType, `${name}.enumType`).map((e) => [str(e.name), enumValues(e)]));
  return { fields, nestedTypes: list(type.nestedType, `${name}.nestedType`), enums };
}

function topLevelEnum(name: string): Map<string, number> {
  return enumValues(definitionType(name, 'Protocol Buffer 3 EnumDescriptorProto'));
}

/** [field, number, descriptor type, type name (last segment) for messages/enums]. */
type Expected = Array<[string, number, string, string?]>;

function assertFields(messageName: string, expected: Expected): void {
  const { fields } = message(messageName);
  for (const [field, number, type, typeName] of expected) {
    const info = fields.get(field);
    assert.ok(info, `${messageName}.${field} exists`);
    assert.equal(info.number, number, `${messageName}.${field} number`);
    assert.equal(info.type, type, `${messageName}.${field} type`);
    if (typeName !== undefined) {
      assert.equal(info.typeName.split('.').at(-1), typeName, `${messageName}.${field} type name`);
    }
  }
}

function assertEnum(actual: Map<string, number> | undefined, expected: Record<string, number>, what: string): void {
  assert.ok(actual, `${what} exists`);
  for (const [name, number] of Object.entries(expected)) {
    assert.equal(actual.get(name), number, `${what}.${name}`);
  }
}

const EXT_PROC = 'envoy.service.ext_proc.v3';
const CORE = 'envoy.config.core.v3';
const MODE = 'envoy.extensions.filters.http.ext_proc.v3.ProcessingMode';

void describe('ext_proc protos match Envoy field numbers and types', () => {
  void it('loads with the agreed proto-loader options', () => {
    assert.equal(PROTO_LOADER_OPTIONS.keepCase, true);
    assert.equal(PROTO_LOADER_OPTIONS.longs, String);
    assert.equal(PROTO_LOADER_OPTIONS.enums, String);
    assert.equal(PROTO_LOADER_OPTIONS.defaults, false);
    assert.equal(PROTO_LOADER_OPTIONS.oneofs, true);
    assert.equal(PROTO_LOADER_OPTIONS.includeDirs?.length, 1);
  });

  void it('ProcessingRequest', () => {
    assertFields(`${EXT_PROC}.ProcessingRequest`, [
      ['request_headers', 2, 'TYPE_MESSAGE', 'HttpHeaders'],
      ['response_headers', 3, 'TYPE_MESSAGE', 'HttpHeaders'],
      ['request_body', 4, 'TYPE_MESSAGE', 'HttpBody'],
      ['response_body', 5, 'TYPE_MESSAGE', 'HttpBody'],
      ['request_trailers', 6, 'TYPE_MESSAGE', 'HttpTrailers'],
      ['response_trailers', 7, 'TYPE_MESSAGE', 'HttpTrailers'],
      ['metadata_context', 8, 'TYPE_MESSAGE', 'Metadata'],
      ['attributes', 9, 'TYPE_MESSAGE'],
      ['observability_mode', 10, 'TYPE_BOOL'],
      ['protocol_config', 11, 'TYPE_MESSAGE', 'ProtocolConfiguration'],
    ]);
    const request = message(`${EXT_PROC}.ProcessingRequest`);
    // 1 was async_mode, removed upstream (protobufjs does not export reserved ranges).
    assert.ok(![...request.fields.values()].some((f) => f.number === 1));
    // attributes is map<string, google.protobuf.Struct>: a repeated map-entry message.
    assert.equal(request.fields.get('attributes')?.label, 'LABEL_REPEATED');
    const entry = request.nestedTypes.find((t) => isRecord(t) && isRecord(t.options) && t.options.mapEntry === true);
    assert.ok(isRecord(entry));
    const entryFields = list(entry.field, 'attributes entry').map((f) => [str(f.name), num(f.number), str(f.type), str(f.typeName)]);
    assert.deepEqual(entryFields, [
      ['key', 1, 'TYPE_STRING', ''],
      ['value', 2, 'TYPE_MESSAGE', 'google.protobuf.Struct'],
    ]);
  });

  void it('ProcessingResponse', () => {
    assertFields(`${EXT_PROC}.ProcessingResponse`, [
      ['request_headers', 1, 'TYPE_MESSAGE', 'HeadersResponse'],
      ['response_headers', 2, 'TYPE_MESSAGE', 'HeadersResponse'],
      ['request_body', 3, 'TYPE_MESSAGE', 'BodyResponse'],
      ['response_body', 4, 'TYPE_MESSAGE', 'BodyResponse'],
      ['request_trailers', 5, 'TYPE_MESSAGE', 'TrailersResponse'],
      ['response_trailers', 6, 'TYPE_MESSAGE', 'TrailersResponse'],
      ['immediate_response', 7, 'TYPE_MESSAGE', 'ImmediateResponse'],
      ['dynamic_metadata', 8, 'TYPE_MESSAGE', 'Struct'],
      ['mode_override', 9, 'TYPE_MESSAGE', 'ProcessingMode'],
      ['override_message_timeout', 10, 'TYPE_MESSAGE', 'Duration'],
      ['streamed_immediate_response', 11, 'TYPE_MESSAGE', 'StreamedImmediateResponse'],
      ['request_drain', 12, 'TYPE_BOOL'],
    ]);
  });

  void it('oneof membership: ProcessingRequest.request, ProcessingResponse.response, BodyMutation.mutation', () => {
    // proto-loader's descriptor JSON does not tell oneof members apart (oneofIndex defaults to 0
    // everywhere), so check what matters: which fields set the decoded discriminator.
    const requestType = pkg[`${EXT_PROC}.ProcessingRequest`];
    const responseType = pkg[`${EXT_PROC}.ProcessingResponse`];
    const mutationType = pkg[`${EXT_PROC}.BodyMutation`];
    const roundTrip = (def: AnyDefinition | undefined, value: object): Record<string, unknown> => {
      assert.ok(isRecord(def) && typeof def.serialize === 'function' && typeof def.deserialize === 'function');
      const serialize = def.serialize as (v: object) => Buffer;
      const deserialize = def.deserialize as (b: Buffer) => unknown;
      const decoded = deserialize(serialize(value));
      assert.ok(isRecord(decoded));
      return decoded;
    };
    for (const member of [
      'request_headers',
      'response_headers',
      'request_body',
      'response_body',
      'request_trailers',
      'response_trailers',
    ]) {
      assert.equal(roundTrip(requestType, { [member]: {} }).request, member);
    }
    assert.equal(roundTrip(requestType, { metadata_context: {} }).request, undefined);
    for (const member of [
      'request_headers',
      'response_headers',
      'request_body',
      'response_body',
      'request_trailers',
      'response_trailers',
      'immediate_response',
      'streamed_immediate_response',
    ]) {
      assert.equal(roundTrip(responseType, { [member]: {} }).response, member);
    }
    assert.equal(roundTrip(responseType, { mode_override: {} }).response, undefined);
    assert.equal(roundTrip(mutationType, { body: Buffer.from('x') }).mutation, 'body');
    assert.equal(roundTrip(mutationType, { clear_body: true }).mutation, 'clear_body');
    assert.equal(roundTrip(mutationType, { streamed_response: {} }).mutation, 'streamed_response');
  });

  void it('headers, bodies, trailers and their replies', () => {
    assertFields(`${EXT_PROC}.HttpHeaders`, [
      ['headers', 1, 'TYPE_MESSAGE', 'HeaderMap'],
      ['attributes', 2, 'TYPE_MESSAGE'],
      ['end_of_stream', 3, 'TYPE_BOOL'],
    ]);
    assertFields(`${EXT_PROC}.HttpBody`, [
      ['body', 1, 'TYPE_BYTES'],
      ['end_of_stream', 2, 'TYPE_BOOL'],
      ['end_of_stream_without_message', 3, 'TYPE_BOOL'],
      ['grpc_message_compressed', 4, 'TYPE_BOOL'],
    ]);
    assertFields(`${EXT_PROC}.HttpTrailers`, [['trailers', 1, 'TYPE_MESSAGE', 'HeaderMap']]);
    assertFields(`${EXT_PROC}.HeadersResponse`, [['response', 1, 'TYPE_MESSAGE', 'CommonResponse']]);
    assertFields(`${EXT_PROC}.BodyResponse`, [['response', 1, 'TYPE_MESSAGE', 'CommonResponse']]);
    assertFields(`${EXT_PROC}.TrailersResponse`, [['header_mutation', 1, 'TYPE_MESSAGE', 'HeaderMutation']]);
    assertFields(`${EXT_PROC}.ProtocolConfiguration`, [
      ['request_body_mode', 1, 'TYPE_ENUM', 'BodySendMode'],
      ['response_body_mode', 2, 'TYPE_ENUM', 'BodySendMode'],
      ['send_body_without_waiting_for_header_response', 3, 'TYPE_BOOL'],
    ]);
  });

  void it('CommonResponse and its ResponseStatus', () => {
    assertFields(`${EXT_PROC}.CommonResponse`, [
      ['status', 1, 'TYPE_ENUM', 'ResponseStatus'],
      ['header_mutation', 2, 'TYPE_MESSAGE', 'HeaderMutation'],
      ['body_mutation', 3, 'TYPE_MESSAGE', 'BodyMutation'],
      ['trailers', 4, 'TYPE_MESSAGE', 'HeaderMap'],
      ['clear_route_cache', 5, 'TYPE_BOOL'],
    ]);
    assertEnum(
      message(`${EXT_PROC}.CommonResponse`).enums.get('ResponseStatus'),
      { CONTINUE: 0, CONTINUE_AND_REPLACE: 1 },
      'ResponseStatus',
    );
  });

  void it('ImmediateResponse, GrpcStatus, HeaderMutation, BodyMutation, streamed replies', () => {
    assertFields(`${EXT_PROC}.ImmediateResponse`, [
      ['status', 1, 'TYPE_MESSAGE', 'HttpStatus'],
      ['headers', 2, 'TYPE_MESSAGE', 'HeaderMutation'],
      ['body', 3, 'TYPE_BYTES'],
      ['grpc_status', 4, 'TYPE_MESSAGE', 'GrpcStatus'],
      ['details', 5, 'TYPE_STRING'],
    ]);
    assertFields(`${EXT_PROC}.GrpcStatus`, [['status', 1, 'TYPE_UINT32']]);
    assertFields(`${EXT_PROC}.HeaderMutation`, [
      ['set_headers', 1, 'TYPE_MESSAGE', 'HeaderValueOption'],
      ['remove_headers', 2, 'TYPE_STRING'],
    ]);
    const mutation = message(`${EXT_PROC}.HeaderMutation`);
    assert.equal(mutation.fields.get('set_headers')?.label, 'LABEL_REPEATED');
    assert.equal(mutation.fields.get('remove_headers')?.label, 'LABEL_REPEATED');
    assertFields(`${EXT_PROC}.BodyMutation`, [
      ['body', 1, 'TYPE_BYTES'],
      ['clear_body', 2, 'TYPE_BOOL'],
      ['streamed_response', 3, 'TYPE_MESSAGE', 'StreamedBodyResponse'],
    ]);
    assertFields(`${EXT_PROC}.StreamedBodyResponse`, [
      ['body', 1, 'TYPE_BYTES'],
      ['end_of_stream', 2, 'TYPE_BOOL'],
      ['end_of_stream_without_message', 3, 'TYPE_BOOL'],
      ['grpc_message_compressed', 4, 'TYPE_BOOL'],
    ]);
    assertFields(`${EXT_PROC}.StreamedImmediateResponse`, [
      ['headers_response', 1, 'TYPE_MESSAGE', 'HttpHeaders'],
      ['body_response', 2, 'TYPE_MESSAGE', 'StreamedBodyResponse'],
      ['trailers_response', 3, 'TYPE_MESSAGE', 'HeaderMap'],
    ]);
  });

  void it('ProcessingMode and its send modes', () => {
    assertFields(MODE, [
      ['request_header_mode', 1, 'TYPE_ENUM', 'HeaderSendMode'],
      ['response_header_mode', 2, 'TYPE_ENUM', 'HeaderSendMode'],
      ['request_body_mode', 3, 'TYPE_ENUM', 'BodySendMode'],
      ['response_body_mode', 4, 'TYPE_ENUM', 'BodySendMode'],
      ['request_trailer_mode', 5, 'TYPE_ENUM', 'HeaderSendMode'],
      ['response_trailer_mode', 6, 'TYPE_ENUM', 'HeaderSendMode'],
    ]);
    const mode = message(MODE);
    assertEnum(mode.enums.get('HeaderSendMode'), { DEFAULT: 0, SEND: 1, SKIP: 2 }, 'HeaderSendMode');
    assertEnum(
      mode.enums.get('BodySendMode'),
      { NONE: 0, STREAMED: 1, BUFFERED: 2, BUFFERED_PARTIAL: 3, FULL_DUPLEX_STREAMED: 4, GRPC: 5 },
      'BodySendMode',
    );
  });

  void it('config.core.v3 header types and Metadata', () => {
    assertFields(`${CORE}.HeaderValue`, [
      ['key', 1, 'TYPE_STRING'],
      ['value', 2, 'TYPE_STRING'],
      ['raw_value', 3, 'TYPE_BYTES'],
    ]);
    assertFields(`${CORE}.HeaderValueOption`, [
      ['header', 1, 'TYPE_MESSAGE', 'HeaderValue'],
      ['append', 2, 'TYPE_MESSAGE', 'BoolValue'],
      ['append_action', 3, 'TYPE_ENUM', 'HeaderAppendAction'],
      ['keep_empty_value', 4, 'TYPE_BOOL'],
    ]);
    assertEnum(
      message(`${CORE}.HeaderValueOption`).enums.get('HeaderAppendAction'),
      { APPEND_IF_EXISTS_OR_ADD: 0, ADD_IF_ABSENT: 1, OVERWRITE_IF_EXISTS_OR_ADD: 2, OVERWRITE_IF_EXISTS: 3 },
      'HeaderAppendAction',
    );
    assertFields(`${CORE}.HeaderMap`, [['headers', 1, 'TYPE_MESSAGE', 'HeaderValue']]);
    assert.equal(message(`${CORE}.HeaderMap`).fields.get('headers')?.label, 'LABEL_REPEATED');
    assertFields(`${CORE}.Metadata`, [
      ['filter_metadata', 1, 'TYPE_MESSAGE'],
      ['typed_filter_metadata', 2, 'TYPE_MESSAGE'],
    ]);
  });

  void it('type.v3.HttpStatus and the common StatusCode values', () => {
    assertFields('envoy.type.v3.HttpStatus', [['code', 1, 'TYPE_ENUM', 'StatusCode']]);
    assertEnum(
      topLevelEnum('envoy.type.v3.StatusCode'),
      {
        Empty: 0,
        OK: 200,
        BadRequest: 400,
        Unauthorized: 401,
        Forbidden: 403,
        NotFound: 404,
        RequestTimeout: 408,
        PayloadTooLarge: 413,
        TooManyRequests: 429,
        InternalServerError: 500,
        NotImplemented: 501,
        BadGateway: 502,
        ServiceUnavailable: 503,
        GatewayTimeout: 504,
      },
      'StatusCode',
    );
  });

  void it('google.protobuf.Value comes from protobufjs with camelCase field names', () => {
    // protobufjs substitutes its bundled well-known types for any google/protobuf/* import, and
    // those name Value's fields in camelCase (keepCase does not apply to them). Same wire
    // numbers as the official struct.proto; different JS property names.
    assertFields('google.protobuf.Value', [
      ['nullValue', 1, 'TYPE_ENUM', 'NullValue'],
      ['numberValue', 2, 'TYPE_DOUBLE'],
      ['stringValue', 3, 'TYPE_STRING'],
      ['boolValue', 4, 'TYPE_BOOL'],
      ['structValue', 5, 'TYPE_MESSAGE', 'Struct'],
      ['listValue', 6, 'TYPE_MESSAGE', 'ListValue'],
    ]);
    assertFields('google.protobuf.Struct', [['fields', 1, 'TYPE_MESSAGE']]);
    assertFields('google.protobuf.ListValue', [['values', 1, 'TYPE_MESSAGE', 'Value']]);
  });
});

void describe('service paths and streaming shapes', () => {
  void it("ExternalProcessor.Process is a bidi stream at Envoy's path", () => {
    const process = wire.externalProcessor.Process;
    assert.equal(process.path, `/${EXT_PROC_SERVICE_NAME}/Process`);
    assert.equal(process.path, '/envoy.service.ext_proc.v3.ExternalProcessor/Process');
    assert.equal(process.requestStream, true);
    assert.equal(process.responseStream, true);
  });

  void it('grpc.health.v1.Health: Check is unary, Watch streams responses', () => {
    assert.equal(wire.health.Check.path, `/${HEALTH_SERVICE_NAME}/Check`);
    assert.equal(wire.health.Check.path, '/grpc.health.v1.Health/Check');
    assert.equal(wire.health.Check.requestStream || wire.health.Check.responseStream, false);
    assert.equal(wire.health.Watch.path, '/grpc.health.v1.Health/Watch');
    assert.equal(wire.health.Watch.requestStream, false);
    assert.equal(wire.health.Watch.responseStream, true);
    assertFields('grpc.health.v1.HealthCheckRequest', [['service', 1, 'TYPE_STRING']]);
    assertFields('grpc.health.v1.HealthCheckResponse', [['status', 1, 'TYPE_ENUM', 'ServingStatus']]);
    assertEnum(
      message('grpc.health.v1.HealthCheckResponse').enums.get('ServingStatus'),
      { UNKNOWN: 0, SERVING: 1, NOT_SERVING: 2, SERVICE_UNKNOWN: 3 },
      'ServingStatus',
    );
  });
});
