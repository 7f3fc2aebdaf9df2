// Small pure helpers to read and build ext_proc wire values (headers, attributes, metadata)
// so the processor reads like the protocol it speaks.

import type { HeaderMap, HeaderMutation, HeaderValueOption, ProtoStruct, ProtoValue } from './messages.js';

/**
 * One header's value, or undefined when absent; repeated headers are joined with commas. Header
 * names are lower-case on the wire (HTTP/2 and Envoy normalise them). A message is read for a
 * handful of headers, so each lookup scans the list and only the values asked for are decoded.
 */
export function headerValue(map: HeaderMap | undefined, key: string): string | undefined {
  const headers = map?.headers;
  if (headers === undefined) return undefined;
  let found: string | undefined;
  for (let i = 0; i < headers.length; i++) {
    const header = headers[i];
    if (header.key !== key) continue;
    // Envoy sends values in raw_value; `value` is only a fallback for other clients.
    const value =
      header.raw_value !== undefined && header.raw_value.length > 0 ? header.raw_value.toString('latin1') : (header.value ?? '');
    found = found === undefined ? value : `${found},${value}`;
  }
  return found;
}

/** Overwrite (never append) a header; Envoy reads only raw_value in mutations. */
function setHeader(key: string, value: string): HeaderValueOption {
  return { header: { key, raw_value: Buffer.from(value, 'latin1') }, append: { value: false } };
}

export function headerMutation(set: ReadonlyArray<readonly [string, string]>, remove: readonly string[] = []): HeaderMutation {
  const mutation: HeaderMutation = { set_headers: set.map(([k, v]) => setHeader(k, v)) };
  if (remove.length > 0) mutation.remove_headers = [...remove];
  return mutation;
}

function stringValue(value: string): ProtoValue {
  return { stringValue: value };
}

/** dynamic_metadata: top-level keys are metadata namespaces, each a Struct of string fields. */
export function metadataNamespaces(namespaces: Record<string, Record<string, string>>): ProtoStruct {
  const fields: Record<string, ProtoValue> = {};
  for (const [namespace, values] of Object.entries(namespaces)) {
    const inner: Record<string, ProtoValue> = {};
    for (const [key, value] of Object.entries(values)) inner[key] = stringValue(value);
    fields[namespace] = { structValue: { fields: inner } };
  }
  return { fields };
}

const EXT_PROC_ATTRIBUTES_KEY = 'envoy.filters.http.ext_proc';

/** Reads one attribute Envoy attached (request/response_attributes in the filter config). */
function attribute(attributes: Record<string, ProtoStruct> | undefined, name: string): string | number | undefined {
  const value = attributes?.[EXT_PROC_ATTRIBUTES_KEY]?.fields?.[name];
  if (value === undefined) return undefined;
  if (value.stringValue !== undefined) return value.stringValue;
  if (value.numberValue !== undefined) return value.numberValue;
  if (value.boolValue !== undefined) return value.boolValue ? 1 : 0;
  return undefined;
}

export function attributeString(attributes: Record<string, ProtoStruct> | undefined, name: string): string | undefined {
  const value = attribute(attributes, name);
  return value === undefined ? undefined : String(value);
}

export function attributeNumber(attributes: Record<string, ProtoStruct> | undefined, name: string): number | undefined {
  const value = attribute(attributes, name);
  if (value === undefined) return undefined;
  const n = typeof value === 'number' ? value : Number(value);
  return Number.isFinite(n) ? n : undefined;
}

/**
 * A string (or a list of strings, joined with commas) under `namespace.key` in forwarded
 * metadata: how gateways pass the subset hint and the served endpoint to the picker.
 */
export function metadataValue(filterMetadata: Record<string, ProtoStruct> | undefined, namespace: string, key: string): string | undefined {
  const value = filterMetadata?.[namespace]?.fields?.[key];
  if (value === undefined) return undefined;
  if (value.stringValue !== undefined) return value.stringValue;
  if (value.listValue !== undefined)
    return (value.listValue.values ?? []).flatMap((v) => (v.stringValue === undefined ? [] : [v.stringValue])).join(',');
  return undefined;
}
