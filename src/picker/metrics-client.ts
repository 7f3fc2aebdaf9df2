// The scraper's HTTP client: GET a model server's metrics page as text, over `node:http` with one
// keep-alive agent. Not `fetch`: Node 20's undici keeps a connection pool per origin for the life
// of the process (~20 KB each, answered or refused), so scraping a fleet whose pods come and go
// grew without bound (measured: +48 MB after 2,000 addresses, +81 MB after 4,000 refusing ones).
// An http.Agent forgets a host as soon as its last socket closes, and idle sockets close soon
// after the scrape interval, so what the scraper holds follows the live fleet.

import { Agent, request } from 'node:http';

/** Why a scrape's HTTP exchange failed; the message is the short reason shown in /debug/endpoints. */
export class ScrapeHttpError extends Error {
  constructor(
    readonly kind: 'timeout' | 'http_error' | 'connect_error' | 'too_large',
    message: string,
  ) {
    super(message);
    this.name = 'ScrapeHttpError';
  }
}

export interface MetricsClientOptions {
  /** An idle connection is kept this long for the next scrape of the same server, then closed. */
  readonly idleMs: number;
  /** Metrics pages above this many bytes are refused (a runaway exporter must not fill our heap). */
  readonly maxBytes: number;
}

export class MetricsClient {
  private readonly agent: Agent;

  constructor(private readonly options: MetricsClientOptions) {
    // One connection per server is enough: a server is scraped once per cycle.
    this.agent = new Agent({ keepAlive: true, maxSockets: 1, maxFreeSockets: 1, timeout: options.idleMs, scheduling: 'lifo' });
  }

  /** The page's text; rejects with ScrapeHttpError, or with the signal's reason when aborted. */
  get(address: string, path: string, timeoutMs: number, signal: AbortSignal): Promise<string> {
    return new Promise((resolve, reject) => {
      let settled = false;
      const fail = (err: Error): void => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        req.destroy();
        reject(err);
      };
      const req = request(`http://${address}${path}`, { agent: this.agent, headers: { accept: 'text/plain' }, signal }, (res) => {
        const status = res.statusCode ?? 0;
        if (status < 200 || status > 299) {
          res.resume();
          fail(new ScrapeHttpError('http_error', `HTTP ${status}`));
          return;
        }
        const chunks: Buffer[] = [];
        let size = 0;
        res.on('data', (chunk: Buffer) => {
          size += chunk.length;
          if (size > this.options.maxBytes)
            fail(new ScrapeHttpError('too_large', `metrics page larger than ${this.options.maxBytes} bytes`));
          else chunks.push(chunk);
        });
        res.on('end', () => {
          if (settled) return;
          settled = true;
          clearTimeout(timer);
          resolve(Buffer.concat(chunks, size).toString('utf8'));
        });
        res.on('error', () => fail(new ScrapeHttpError('connect_error', 'connection failed')));
      });
      req.on('error', (err) => fail(signal.aborted ? err : new ScrapeHttpError('connect_error', 'connection failed')));
      const timer = setTimeout(() => fail(new ScrapeHttpError('timeout', `no answer within ${timeoutMs} ms`)), timeoutMs);
      req.end();
    });
  }

  /** Closes idle connections (shutdown). */
  close(): void {
    this.agent.destroy();
  }
}
