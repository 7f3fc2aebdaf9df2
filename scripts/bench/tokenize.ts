// The prompt's token ids two ways, for precise prefix matching (issue 31, point 3): the model's
// tokenizer and chat template in process (src/kv-cache/file-tokenizer.ts), or the serving vLLM's
// `POST /tokenize`. Per request: our CPU, the latency it adds before a pick, and whether the ids
// are the same. Requests are sent one at a time (the latency of one pick, not a server's
// throughput); the server's own CPU for /tokenize comes on top and is not counted here.

import { request as httpRequest, Agent } from 'node:http';
import { FileTokenizer } from '../../src/kv-cache/file-tokenizer.js';
import { promptSourceOf } from '../../src/kv-cache/prompt-source.js';
import type { ChatMessage } from '../../test/support/cache-bench.js';
import { percentile } from './stats.js';

export interface TokenizeFigures {
  readonly way: 'in process' | 'POST /tokenize';
  readonly requests: number;
  /** Our CPU per request (user + system), microseconds. */
  readonly cpuMicros: number;
  readonly p50Ms: number;
  readonly p99Ms: number;
  /** Requests whose ids equal the server's /tokenize ids. */
  readonly sameIds: number;
}

export interface TokenizeComparison {
  readonly loadMs: number;
  readonly rows: readonly TokenizeFigures[];
  readonly meanTokens: number;
}

export async function compareTokenizers(
  tokenizerDir: string,
  server: { host: string; port: number; model: string },
  requests: readonly ChatMessage[][],
): Promise<TokenizeComparison> {
  const loadStarted = performance.now();
  const tokenizer = await FileTokenizer.load(tokenizerDir);
  const loadMs = performance.now() - loadStarted;
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  const remote = (messages: readonly ChatMessage[]): Promise<number[]> =>
    postJson(agent, server, '/tokenize', { model: server.model, messages, add_generation_prompt: true }).then(
      (body) => (body as { tokens: number[] }).tokens,
    );
  const local = (messages: readonly ChatMessage[]): readonly number[] | undefined => {
    const source = promptSourceOf({ model: server.model, messages });
    return source === undefined ? undefined : tokenizer.tokenize(source);
  };
  // Warm both paths (JIT, the connection), then measure each over the same requests.
  for (const messages of requests.slice(0, 20)) {
    local(messages);
    await remote(messages);
  }
  const truth: number[][] = [];
  const measure = async (
    way: TokenizeFigures['way'],
    run: (m: readonly ChatMessage[], i: number) => Promise<readonly number[] | undefined>,
  ) => {
    const times: number[] = [];
    let same = 0;
    const cpu = process.cpuUsage();
    for (const [i, messages] of requests.entries()) {
      const started = performance.now();
      const ids = await run(messages, i);
      times.push(performance.now() - started);
      if (ids !== undefined && truth[i] !== undefined && sameIds(ids, truth[i])) same++;
    }
    const used = process.cpuUsage(cpu);
    times.sort((a, b) => a - b);
    return {
      way,
      requests: requests.length,
      cpuMicros: (used.user + used.system) / requests.length,
      p50Ms: percentile(times, 50),
      p99Ms: percentile(times, 99),
      sameIds: same,
    };
  };
  const viaServer = await measure('POST /tokenize', async (messages, i) => (truth[i] = await remote(messages)));
  const inProcess = await measure('in process', (messages) => Promise.resolve(local(messages)));
  agent.destroy();
  const meanTokens = truth.reduce((n, ids) => n + ids.length, 0) / truth.length;
  return { loadMs, rows: [inProcess, viaServer], meanTokens };
}

function sameIds(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((v, i) => v === b[i]);
}

function postJson(agent: Agent, server: { host: string; port: number }, path: string, body: unknown): Promise<unknown> {
  const text = JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      {
        host: server.host,
        port: server.port,
        path,
        method: 'POST',
        agent,
        headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) },
      },
      (res) => {
        let answer = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => (answer += chunk));
        res.on('end', () => {
          if (res.statusCode !== 200) return reject(new Error(`POST ${path}: HTTP ${res.statusCode} ${answer}`));
          try {
            resolve(JSON.parse(answer));
          } catch (err) {
            reject(err instanceof Error ? err : new Error(String(err)));
          }
        });
      },
    );
    req.on('error', reject);
    req.end(text);
  });
}
