// Envoy's gRPC access-log service (envoy.service.accesslog.v3.AccessLogService/StreamAccessLogs),
// served next to ext_proc on the same gRPC server. Envoy's ext_proc stream ends the same way when
// the client leaves and when the model server resets the answer half-way (the filter's stream is
// closed on destroy, for either reason); the access log entry Envoy writes when the HTTP stream
// ends is the first place that tells them apart: its response flags say who ended it (DC/DR: the
// downstream; UR/UC/...: the upstream), and its response code says what the client was answered.
// Our Envoy configs log only entries with a response flag (the rare ones), so this costs nothing
// on the common path. Only the few fields that matter are decoded; the rest is skipped unread.
//
// Messages (api/envoy/service/accesslog/v3/als.proto, api/envoy/data/accesslog/v3/accesslog.proto):
//   StreamAccessLogsMessage { Identifier identifier = 1; HTTPAccessLogEntries http_logs = 2; … }
//   HTTPAccessLogEntries { repeated HTTPAccessLogEntry log_entry = 1 }
//   HTTPAccessLogEntry { AccessLogCommon common_properties = 1; HTTPRequestProperties request = 3;
//                        HTTPResponseProperties response = 4 }
//   Identifier { string log_name = 2 }: a peer's forwarded entries carry FORWARDED_LOG_NAME here.
//   AccessLogCommon { ResponseFlags response_flags = 16; config.core.v3.Metadata metadata = 17 }
//     Metadata { map<string, Struct> filter_metadata = 1 }: the stream's dynamic metadata, where
//     the replica that picked it wrote its own address (REPLICA_KEY in `envoy.lb`).
//   ResponseFlags: one bool per flag, field n
//                     for Envoy's CoreResponseFlag n-1 (1 failed_local_healthcheck … 27 dns_resolution_failure),
//                     then 28 downstream_remote_reset (DR: an HTTP/2 client reset its stream; seen from
//                     Envoy 1.40 with a client's RST_STREAM CANCEL), which is CoreResponseFlag 28.
//   HTTPRequestProperties { string request_id = 9 }
//   HTTPResponseProperties { UInt32Value response_code = 1; string response_code_details = 6 }
// The reply (StreamAccessLogsResponse) is empty and sent once, when Envoy half-closes.

import type { BidiCall, BidiMethod, CallSink } from '../grpc/bidi-call.js';
import { frameMessage } from '../grpc/framing.js';
import { Reader, WIRE_LEN, WIRE_VARINT } from '../grpc/protobuf-wire.js';
import { DESTINATION_METADATA_NAMESPACE, REPLICA_KEY } from './protocol-names.js';

export const ACCESS_LOG_PATH = '/envoy.service.accesslog.v3.AccessLogService/StreamAccessLogs';

/** What one access-log entry tells about how an HTTP stream ended. */
export interface AccessLogEntry {
  /** `x-request-id`, the id llm-extproc also knows the request by; '' when Envoy logged none. */
  readonly requestId: string;
  /** The status the client was answered; undefined when none went out. */
  readonly status: number | undefined;
  /**
   * Response flags as the legacy bitmask of `response.flags` (bit i = Envoy's CoreResponseFlag i),
   * so errors/envoy-response-flags.ts reads both. Flags after downstream_remote_reset are not decoded.
   */
  readonly flags: number;
  readonly codeDetails: string;
  /** The address of the replica that picked the stream (its `envoy.lb` REPLICA_KEY); '' when none wrote one. */
  readonly owner: string;
  /** The entry's own bytes (a view into the message), for forwarding it to its owner unchanged. */
  readonly wire: Buffer;
}

/** One StreamAccessLogsMessage: its entries, and whether a peer forwarded them (never to be forwarded again). */
export interface AccessLogBatch {
  readonly forwarded: boolean;
  readonly entries: AccessLogEntry[];
}

/** The log name a replica puts in the Identifier of the entries it forwards (access-log-forwarder.ts). */
export const FORWARDED_LOG_NAME = 'llm_extproc_forwarded';

/** The flag fields decoded: ResponseFlags field n is bit n-1 up to here. */
const LAST_FLAG_FIELD = 27;
/** ResponseFlags.downstream_remote_reset, and its bit (DropOverLoad, bit 27, has no field before it). */
const DOWNSTREAM_REMOTE_RESET_FIELD = 28;
const DOWNSTREAM_REMOTE_RESET_BIT = 1 << 28;

/** One StreamAccessLogsMessage's HTTP entries; throws MalformedMessage for bytes that are not one. */
export function decodeAccessLogs(bytes: Buffer): AccessLogBatch {
  const entries: AccessLogEntry[] = [];
  let forwarded = false;
  const r = new Reader(bytes);
  const end = bytes.length;
  while (r.pos < end) {
    const tag = r.uint32(end);
    if (tag === ((1 << 3) | WIRE_LEN)) {
      forwarded = decodeLogName(r, r.lengthEnd(end)) === FORWARDED_LOG_NAME;
      continue;
    }
    if (tag !== ((2 << 3) | WIRE_LEN)) {
      r.skip(tag & 7, end);
      continue;
    }
    const logsEnd = r.lengthEnd(end);
    while (r.pos < logsEnd) {
      const entryTag = r.uint32(logsEnd);
      if (entryTag === ((1 << 3) | WIRE_LEN)) {
        const entryEnd = r.lengthEnd(logsEnd);
        const start = r.pos;
        entries.push(decodeEntry(r, entryEnd, bytes.subarray(start, entryEnd)));
      } else r.skip(entryTag & 7, logsEnd);
    }
  }
  return { forwarded, entries };
}

function decodeLogName(r: Reader, end: number): string {
  let name = '';
  while (r.pos < end) {
    const tag = r.uint32(end);
    if (tag === ((2 << 3) | WIRE_LEN)) name = r.string(end);
    else r.skip(tag & 7, end);
  }
  return name;
}

function decodeEntry(r: Reader, end: number, wire: Buffer): AccessLogEntry {
  let requestId = '';
  let status: number | undefined;
  let flags = 0;
  let codeDetails = '';
  let owner = '';
  while (r.pos < end) {
    const tag = r.uint32(end);
    const field = tag >>> 3;
    if ((tag & 7) !== WIRE_LEN || (field !== 1 && field !== 3 && field !== 4)) {
      r.skip(tag & 7, end);
      continue;
    }
    const stop = r.lengthEnd(end);
    while (r.pos < stop) {
      const inner = r.uint32(stop);
      const innerField = inner >>> 3;
      const wireType = inner & 7;
      if (field === 1 && innerField === 16 && wireType === WIRE_LEN) flags |= decodeFlags(r, r.lengthEnd(stop));
      else if (field === 1 && innerField === 17 && wireType === WIRE_LEN) owner = decodeOwner(r, r.lengthEnd(stop)) ?? owner;
      else if (field === 3 && innerField === 9 && wireType === WIRE_LEN) requestId = r.string(stop);
      else if (field === 4 && innerField === 1 && wireType === WIRE_LEN) status = decodeUInt32Value(r, r.lengthEnd(stop));
      else if (field === 4 && innerField === 6 && wireType === WIRE_LEN) codeDetails = r.string(stop);
      else r.skip(wireType, stop);
    }
  }
  return { requestId, status, flags, codeDetails, owner, wire };
}

/**
 * Metadata { map<string, Struct> filter_metadata = 1 }: the string at `envoy.lb` / REPLICA_KEY.
 * A map entry is { key = 1; value = 2 }; a Struct is { map<string, Value> fields = 1 }; a Value's
 * string_value is field 3.
 */
function decodeOwner(r: Reader, end: number): string | undefined {
  let owner: string | undefined;
  while (r.pos < end) {
    const tag = r.uint32(end);
    if (tag !== ((1 << 3) | WIRE_LEN)) {
      r.skip(tag & 7, end);
      continue;
    }
    mapEntry(r, r.lengthEnd(end), DESTINATION_METADATA_NAMESPACE, (structEnd) => {
      while (r.pos < structEnd) {
        const fieldTag = r.uint32(structEnd);
        if (fieldTag !== ((1 << 3) | WIRE_LEN)) r.skip(fieldTag & 7, structEnd);
        else mapEntry(r, r.lengthEnd(structEnd), REPLICA_KEY, (valueEnd) => (owner = stringValue(r, valueEnd)));
      }
    });
  }
  return owner;
}

/** Reads a map entry up to `end`, handing its value's end to `read` when its key is `key` (else skipping it). */
function mapEntry(r: Reader, end: number, key: string, read: (valueEnd: number) => void): void {
  let matched = false;
  while (r.pos < end) {
    const tag = r.uint32(end);
    if (tag === ((1 << 3) | WIRE_LEN)) matched = r.string(end) === key;
    else if (tag === ((2 << 3) | WIRE_LEN) && matched) read(r.lengthEnd(end));
    else r.skip(tag & 7, end);
  }
}

function stringValue(r: Reader, end: number): string | undefined {
  let value: string | undefined;
  while (r.pos < end) {
    const tag = r.uint32(end);
    if (tag === ((3 << 3) | WIRE_LEN)) value = r.string(end);
    else r.skip(tag & 7, end);
  }
  return value;
}

function decodeFlags(r: Reader, end: number): number {
  let flags = 0;
  while (r.pos < end) {
    const tag = r.uint32(end);
    const field = tag >>> 3;
    if (field >= 1 && field <= LAST_FLAG_FIELD && (tag & 7) === WIRE_VARINT) {
      if (r.low32(end) !== 0) flags |= 1 << (field - 1);
    } else if (field === DOWNSTREAM_REMOTE_RESET_FIELD && (tag & 7) === WIRE_VARINT) {
      if (r.low32(end) !== 0) flags |= DOWNSTREAM_REMOTE_RESET_BIT;
    } else if (field === 13 && (tag & 7) === WIRE_LEN) {
      // unauthorized_details is a message: present means set.
      r.skip(WIRE_LEN, end);
      flags |= 1 << 12;
    } else r.skip(tag & 7, end);
  }
  return flags;
}

function decodeUInt32Value(r: Reader, end: number): number {
  let value = 0;
  while (r.pos < end) {
    const tag = r.uint32(end);
    if (tag === ((1 << 3) | WIRE_VARINT)) value = r.low32(end);
    else r.skip(tag & 7, end);
  }
  return value;
}

/** Hears the entries, and whether any Envoy is streaming its access log to us. */
export interface AccessLogListener {
  /** One entry; `forwarded`: a peer sent it (access-log-routing.ts: it stays here). */
  readonly entry: (entry: AccessLogEntry, forwarded: boolean) => void;
  /** The number of open access-log streams changed. */
  readonly streams?: (open: number) => void;
}

const EMPTY_REPLY = frameMessage(new Uint8Array(0));

/** The StreamAccessLogs method: each decoded entry goes to `listener`. */
export function accessLogMethod(listener: AccessLogListener): BidiMethod<AccessLogBatch, null> {
  const open = new Set<AccessLogCall>();
  const opened = (call: AccessLogCall): void => {
    open.add(call);
    listener.streams?.(open.size);
  };
  const ended = (call: AccessLogCall): void => {
    if (open.delete(call)) listener.streams?.(open.size);
  };
  return {
    path: ACCESS_LOG_PATH,
    decode: decodeAccessLogs,
    frame: () => EMPTY_REPLY,
    start: (sink) => {
      const call = new AccessLogCall(sink, listener, ended);
      opened(call);
      return call;
    },
    get openCalls() {
      return open.size;
    },
    releaseOpenCalls: () => {
      for (const call of [...open]) call.release();
    },
    // Envoy never ends a log stream: end them when shutdown begins, so they do not hold it up.
    shutdownStarted: () => {
      for (const call of [...open]) call.release();
    },
  };
}

class AccessLogCall implements BidiCall<AccessLogBatch> {
  open = true;
  isFinished = false;

  constructor(
    private readonly sink: CallSink<null>,
    private readonly listener: AccessLogListener,
    private readonly ended: (call: AccessLogCall) => void,
  ) {}

  message({ forwarded, entries }: AccessLogBatch): void {
    if (!this.open) return;
    for (const entry of entries) this.listener.entry(entry, forwarded);
  }

  inputEnded(): boolean {
    const wasOpen = this.open;
    this.open = false;
    return wasOpen;
  }

  /** Envoy is done logging on this stream: the one (empty) reply, then OK. */
  halfClosed(): void {
    if (this.isFinished) return;
    this.finish();
    this.sink.write(null);
    this.sink.endOk();
  }

  cancelled(): void {
    this.finish();
  }

  transportFailed(): void {
    this.finish();
  }

  fail(_error: Error, code: 'INTERNAL' | 'RESOURCE_EXHAUSTED' = 'INTERNAL', details = 'access log message rejected'): void {
    if (this.isFinished) return;
    this.finish();
    this.sink.endError(code, details);
  }

  /** Shutdown: end the stream with OK; Envoy reconnects to another replica of us. */
  release(): void {
    if (this.isFinished) return;
    this.finish();
    this.sink.endOk();
  }

  private finish(): void {
    this.open = false;
    this.isFinished = true;
    this.ended(this);
  }
}
