// A minimal HTTP/1.1 client for end-to-end tests that keeps the exact response bytes and reports
// a connection reset as data (not a thrown error), because a broken stream is a result we assert on.

import { request as httpRequest, Agent } from 'node:http';

export interface ClientResponse {
  readonly status: number;
  readonly headers: Readonly<Record<string, string>>;
  readonly body: Buffer;
  /** Set when the connection broke before the response completed (e.g. upstream reset mid-stream). */
  readonly error: Error | undefined;
  /** The x-request-id the client sent (undefined: it sent none, and the gateway made one). */
  readonly sentRequestId: string | undefined;
  text(): string;
  json(): unknown;
}

export interface ClientRequest {
  readonly method?: string;
  readonly path: string;
  readonly body?: string | Buffer | object;
  readonly headers?: Readonly<Record<string, string>>;
  readonly timeoutMs?: number;
  /** Called with each body chunk as it arrives (to act while a stream is still open). */
  readonly onData?: (chunk: Buffer) => void;
  /** Hangs up (destroys the connection) when aborted; the response then has `error` set. */
  readonly signal?: AbortSignal;
}

// No connection reuse: each request's failure must not bleed into the next.
const agent = new Agent({ keepAlive: false });

export function send(port: number, req: ClientRequest): Promise<ClientResponse> {
  const body =
    req.body === undefined
      ? undefined
      : Buffer.isBuffer(req.body)
        ? req.body
        : Buffer.from(typeof req.body === 'string' ? req.body : JSON.stringify(req.body));
  const chunked = req.headers?.['transfer-encoding'] === 'chunked';
  const headers: Record<string, string> = {
    ...(body === undefined ? {} : { 'content-type': 'application/json', ...(chunked ? {} : { 'content-length': String(body.length) }) }),
    ...req.headers,
  };
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let status = 0;
    let responseHeaders: Record<string, string> = {};
    let settled = false;
    const finish = (error: Error | undefined): void => {
      if (settled) return;
      settled = true;
      const bytes = Buffer.concat(chunks);
      resolve({
        status,
        headers: responseHeaders,
        body: bytes,
        error,
        sentRequestId: Object.entries(headers).find(([name]) => name.toLowerCase() === 'x-request-id')?.[1],
        text: () => bytes.toString('utf8'),
        json: () => JSON.parse(bytes.toString('utf8')) as unknown,
      });
    };
    const clientRequest = httpRequest(
      { host: '127.0.0.1', port, method: req.method ?? (body === undefined ? 'GET' : 'POST'), path: req.path, headers, agent },
      (res) => {
        status = res.statusCode ?? 0;
        responseHeaders = Object.fromEntries(Object.entries(res.headers).map(([k, v]) => [k, Array.isArray(v) ? v.join(', ') : (v ?? '')]));
        res.on('data', (chunk: Buffer) => {
          chunks.push(chunk);
          req.onData?.(chunk);
        });
        // Only a response whose body arrived completely is fine: a connection that ended early
        // (reset, or a close before the last chunk / the declared length) is an error.
        res.on('end', () => finish(res.complete ? undefined : new Error('response body incomplete')));
        res.on('error', (err) => finish(err));
        res.on('aborted', () => finish(new Error('response aborted')));
        res.on('close', () => finish(new Error('connection closed before the response body ended')));
      },
    );
    req.signal?.addEventListener('abort', () => clientRequest.destroy(new Error('client hung up')), { once: true });
    clientRequest.setTimeout(req.timeoutMs ?? 30_000, () =>
      clientRequest.destroy(new Error(`client timeout after ${req.timeoutMs ?? 30_000} ms`)),
    );
    clientRequest.on('error', (err) => {
      if (status !== 0) finish(err);
      else if (!settled) {
        settled = true;
        reject(err);
      }
    });
    clientRequest.end(body);
  });
}
