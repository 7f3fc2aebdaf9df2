// An HTTP/1.1 client for tests that need the exact bytes and the exact failure: every body chunk
// as received, and whether the response was cut (reset, timeout) after its headers arrived —
// things fetch() hides behind a generic "terminated".

import { request } from 'node:http';
import type { Agent, IncomingHttpHeaders, OutgoingHttpHeaders } from 'node:http';

export interface RawRequestOptions {
  readonly url: string;
  readonly method?: string;
  readonly headers?: OutgoingHttpHeaders;
  /** Objects are sent as JSON with content-type application/json. */
  readonly body?: string | Buffer | Record<string, unknown>;
  /** Gives up when the connection is idle this long (before or after the headers). */
  readonly timeoutMs?: number;
  /** Default `false`: a fresh connection per request, closed afterwards. */
  readonly agent?: Agent | false;
}

export interface RawResponse {
  readonly status: number;
  readonly headers: IncomingHttpHeaders;
  /** Body chunks in arrival order. */
  readonly chunks: Buffer[];
  readonly body: Buffer;
  /** Set when the response broke after its headers (reset, timeout); the body is what arrived first. */
  readonly error: (Error & { code?: string }) | undefined;
  /** Local port of the connection used, to tell reused keep-alive connections apart. */
  readonly localPort: number | undefined;
}

/** Error for an idle timeout; `code` is `ETIMEDOUT` so callers can tell it from a reset. */
export class RequestTimeoutError extends Error {
  readonly code = 'ETIMEDOUT';
}

/**
 * Sends one request. Rejects when no response headers arrive (refused, reset, timeout); resolves
 * once the body ends or breaks, with `error` set in the second case.
 */
export function rawRequest(opts: RawRequestOptions): Promise<RawResponse> {
  let payload: Buffer | undefined;
  const headers: OutgoingHttpHeaders = { ...opts.headers };
  if (Buffer.isBuffer(opts.body) || typeof opts.body === 'string') {
    payload = Buffer.from(opts.body);
  } else if (opts.body !== undefined) {
    payload = Buffer.from(JSON.stringify(opts.body));
    headers['content-type'] ??= 'application/json';
  }
  if (payload !== undefined) headers['content-length'] = payload.length;

  return new Promise((resolve, reject) => {
    const req = request(opts.url, {
      method: opts.method ?? (payload === undefined ? 'GET' : 'POST'),
      headers,
      agent: opts.agent ?? false,
      ...(opts.timeoutMs === undefined ? {} : { timeout: opts.timeoutMs }),
    });
    req.on('timeout', () => req.destroy(new RequestTimeoutError(`no data for ${opts.timeoutMs} ms from ${opts.url}`)));
    // Before the headers an error rejects; after them it only marks the response as broken.
    let responded = false;
    req.on('error', (err) => {
      if (!responded) reject(err);
    });
    req.on('response', (res) => {
      responded = true;
      const chunks: Buffer[] = [];
      let done = false;
      const finish = (error: Error | undefined): void => {
        if (done) return;
        done = true;
        resolve({
          status: res.statusCode ?? 0,
          headers: res.headers,
          chunks,
          body: Buffer.concat(chunks),
          error,
          localPort: req.socket?.localPort,
        });
      };
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => finish(undefined));
      // A break after the headers surfaces on the response, on the request (timeout), or only as
      // an early close; whichever comes first wins.
      res.on('error', (err) => finish(err));
      req.on('error', (err) => finish(err));
      res.on('close', () => finish(res.complete ? undefined : new Error('response closed before it was complete')));
    });
    req.end(payload);
  });
}
