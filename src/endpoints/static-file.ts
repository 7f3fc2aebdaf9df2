// Pure parsing of the static endpoints file: pools, the models they serve, and their endpoints with
// an optional state. It is the source for running without a cluster (demo, tests, bare metal).

import { parse as parseYaml } from 'yaml';
import { ENDPOINT_STATES } from './model.js';
import type { ObservedEndpoint, ObservedPool } from './model.js';
import { errorMessage, firstLine } from '../util/error-message.js';

export class StaticFileError extends Error {
  override readonly name = 'StaticFileError';
}

const SOURCE_STATES = ENDPOINT_STATES.filter((s): s is ObservedEndpoint['state'] => s !== 'Quarantined');
const ADDRESS = /^(\[[0-9a-fA-F:.]+\]|[^\s:[\]]+):(\d{1,5})$/;

function fail(where: string, message: string): never {
  throw new StaticFileError(`${where}: ${message}`);
}

function parseEndpoint(raw: unknown, where: string): ObservedEndpoint {
  if (typeof raw === 'string') raw = { address: raw };
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) fail(where, 'expected an address string or a mapping');
  const record = raw as Record<string, unknown>;
  const address = record.address;
  if (typeof address !== 'string' || !ADDRESS.test(address))
    fail(`${where}.address`, `expected "host:port", got ${JSON.stringify(address)}`);
  const port = Number(ADDRESS.exec(address)?.[2]);
  if (port < 1 || port > 65535) fail(`${where}.address`, `port ${port} out of range`);
  let state: ObservedEndpoint['state'] = 'Ready';
  if (record.state !== undefined) {
    if (typeof record.state !== 'string' || !(SOURCE_STATES as readonly string[]).includes(record.state)) {
      fail(`${where}.state`, `expected one of ${SOURCE_STATES.join(', ')}`);
    }
    state = record.state as ObservedEndpoint['state'];
  } else if (record.ready === false) {
    state = 'NotReady';
  }
  const reason = typeof record.reason === 'string' ? record.reason : state === 'Ready' ? '' : 'marked in the endpoints file';
  const id = typeof record.name === 'string' && record.name !== '' ? record.name : address;
  return { id, address, state, reason };
}

export function parseStaticEndpoints(text: string): ObservedPool[] {
  let doc: unknown;
  try {
    doc = parseYaml(text);
  } catch (err) {
    throw new StaticFileError(`not valid YAML: ${firstLine(errorMessage(err))}`);
  }
  if (typeof doc !== 'object' || doc === null || !Array.isArray((doc as Record<string, unknown>).pools))
    fail('pools', 'expected a list of pools at the top level');
  const pools = (doc as { pools: unknown[] }).pools;
  const names = new Set<string>();
  return pools.map((raw, i): ObservedPool => {
    const where = `pools[${i}]`;
    if (typeof raw !== 'object' || raw === null) fail(where, 'expected a mapping');
    const pool = raw as Record<string, unknown>;
    if (typeof pool.name !== 'string' || pool.name === '') fail(`${where}.name`, 'required');
    if (names.has(pool.name)) fail(`${where}.name`, `duplicate pool name ${pool.name}`);
    names.add(pool.name);
    const models = pool.models;
    if (!Array.isArray(models) || models.length === 0 || models.some((m) => typeof m !== 'string' || m === ''))
      fail(`${where}.models`, 'expected a non-empty list of model names');
    const endpoints = pool.endpoints ?? [];
    if (!Array.isArray(endpoints)) fail(`${where}.endpoints`, 'expected a list');
    const parsed = endpoints.map((e, j) => parseEndpoint(e, `${where}.endpoints[${j}]`));
    const seen = new Set<string>();
    parsed.forEach((e, j) => {
      if (seen.has(e.id)) fail(`${where}.endpoints[${j}]`, `duplicate endpoint ${e.id}`);
      seen.add(e.id);
    });
    return { name: pool.name, models: models as string[], endpoints: parsed };
  });
}
