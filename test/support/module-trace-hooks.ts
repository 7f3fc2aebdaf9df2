// The loader hook of module-trace.ts: appends the URL of every module loaded to the trace file.
// Runs on the ESM loader's thread, so it writes synchronously rather than messaging the main thread.

import { appendFileSync } from 'node:fs';

let traceFile = '';

export function initialize(data: { traceFile: string }): void {
  traceFile = data.traceFile;
}

interface LoadResult {
  readonly format?: string | null;
}

export async function load<R extends LoadResult>(
  url: string,
  context: unknown,
  nextLoad: (url: string, context: unknown) => Promise<R>,
): Promise<R> {
  appendFileSync(traceFile, `${url}\n`);
  return nextLoad(url, context);
}
