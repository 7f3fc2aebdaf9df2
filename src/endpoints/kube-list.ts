// One page of a Kubernetes list, as raw JSON (the shape the watch delivers too), fetched with the
// kubeconfig's own connection options: client-node's applyToFetchOptions gives the agent (CA,
// client certificate, TLS server name, proxy) and the headers (bearer token, exec or OIDC
// credentials, impersonation), exactly what it gives its watch. The generated typed clients, and
// the thousands of model classes they deserialize into, are never loaded (kube-client.ts).

import { request as httpRequest } from 'node:http';
import type { Agent, IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import type { KubeConfig } from './kube-client.js';
import { field } from './list-watch.js';
import type { ListPage } from './list-watch.js';

/** A list the API server answered with another status than 200: `statusCode` and the body (a Status object). */
class KubeApiError extends Error {
  constructor(
    readonly statusCode: number,
    readonly body: string,
  ) {
    super(`HTTP ${statusCode}`);
    this.name = 'KubeApiError';
  }
}

/** The most of an error body kept (a Status object is a few hundred bytes; a proxy's HTML page is not). */
const MAX_ERROR_BODY_BYTES = 16 * 1024;

/** Header values as client-node hands them over (node-fetch's Headers, or a plain record). */
type HeaderSource = { forEach(visit: (value: string, name: string) => void): void } | Record<string, string> | string[][] | undefined;

function plainHeaders(source: HeaderSource): Record<string, string> {
  const out: Record<string, string> = { accept: 'application/json' };
  if (source === undefined) return out;
  if (Array.isArray(source)) {
    for (const [name, value] of source) if (name !== undefined && value !== undefined) out[name.toLowerCase()] = value;
  } else if (typeof source.forEach === 'function') {
    (source as { forEach(visit: (value: string, name: string) => void): void }).forEach((value, name) => (out[name.toLowerCase()] = value));
  } else {
    for (const [name, value] of Object.entries(source)) out[name.toLowerCase()] = String(value);
  }
  return out;
}

/** A list's page as the loop keeps it: its items (raw objects), resourceVersion and continue token. */
function parseListPage(list: unknown): ListPage {
  const items = field(list, 'items');
  const metadata = field(list, 'metadata');
  const rv = field(metadata, 'resourceVersion');
  const token = field(metadata, 'continue');
  return {
    items: Array.isArray(items) ? (items as unknown[]) : [],
    resourceVersion: typeof rv === 'string' ? rv : '',
    continueToken: typeof token === 'string' && token !== '' ? token : undefined,
  };
}

/**
 * GET one page of the list at `path` (e.g. `/api/v1/namespaces/x/pods`) with `query` from the
 * kubeconfig's current cluster; rejects with a KubeApiError when the answer is not a 200, and with
 * the abort reason when `signal` fires.
 */
export async function listPage(
  kubeConfig: KubeConfig,
  path: string,
  query: Readonly<Record<string, string | number | undefined>>,
  signal: AbortSignal,
): Promise<ListPage> {
  const cluster = kubeConfig.getCurrentCluster();
  if (cluster === null) throw new Error('kubeconfig has no current cluster');
  const url = new URL(cluster.server + path);
  for (const [name, value] of Object.entries(query)) if (value !== undefined && value !== '') url.searchParams.set(name, String(value));
  const options = await kubeConfig.applyToFetchOptions({});
  signal.throwIfAborted();
  const request = url.protocol === 'http:' ? httpRequest : httpsRequest;
  const response = await new Promise<IncomingMessage>((resolve, reject) => {
    const req = request(url, {
      method: 'GET',
      agent: options.agent as Agent | undefined,
      headers: plainHeaders(options.headers as HeaderSource),
      signal,
    });
    req.once('response', resolve);
    req.once('error', reject);
    req.end();
  });
  const chunks: Buffer[] = [];
  let bytes = 0;
  for await (const chunk of response as AsyncIterable<Buffer>) {
    if (response.statusCode !== 200 && bytes >= MAX_ERROR_BODY_BYTES) continue;
    chunks.push(chunk);
    bytes += chunk.length;
  }
  const text = Buffer.concat(chunks).toString('utf8');
  if (response.statusCode !== 200) throw new KubeApiError(response.statusCode ?? 0, text.slice(0, MAX_ERROR_BODY_BYTES));
  return parseListPage(JSON.parse(text) as unknown);
}
