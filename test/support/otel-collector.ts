// A real OpenTelemetry Collector for the tracing tests: the OTLP receiver (HTTP, on loopback) and
// the file exporter writing OTLP JSON, one line per export. `scripts/install-otelcol.mjs` builds the
// binary into the tools cache (npm test and .ci/run run it first) and prints its path. The process
// is tied to the test's (tied-process.ts): it cannot outlive it.

import { readFile, writeFile } from 'node:fs/promises';
import { connect } from 'node:net';
import { join } from 'node:path';
import { installerOutput } from './installer-output.js';
import { TiedProcess } from './tied-process.js';
import { waitUntil } from './wait-until.js';

/** One attribute value as OTLP JSON writes it (64-bit integers as strings). */
export interface OtlpValue {
  readonly stringValue?: string;
  readonly intValue?: string | number;
  readonly doubleValue?: number;
  readonly boolValue?: boolean;
  readonly arrayValue?: { readonly values?: readonly OtlpValue[] };
}

interface OtlpKeyValue {
  readonly key: string;
  readonly value: OtlpValue;
}

export interface CollectedSpan {
  readonly traceId: string;
  readonly spanId: string;
  readonly parentSpanId: string;
  readonly traceState: string;
  readonly name: string;
  readonly attributes: Readonly<Record<string, OtlpValue>>;
  readonly events: readonly { readonly name: string; readonly attributes: Readonly<Record<string, OtlpValue>> }[];
  readonly status: { readonly code?: number; readonly message?: string };
  readonly resource: Readonly<Record<string, OtlpValue>>;
}

interface OtlpLine {
  readonly resourceSpans?: readonly {
    readonly resource?: { readonly attributes?: readonly OtlpKeyValue[] };
    readonly scopeSpans?: readonly {
      readonly spans?: readonly {
        readonly traceId: string;
        readonly spanId: string;
        readonly parentSpanId?: string;
        readonly traceState?: string;
        readonly name: string;
        readonly attributes?: readonly OtlpKeyValue[];
        readonly events?: readonly { readonly name: string; readonly attributes?: readonly OtlpKeyValue[] }[];
        readonly status?: { readonly code?: number; readonly message?: string };
      }[];
    }[];
  }[];
}

let binary: Promise<string> | undefined;

/** The collector's path (built on first use if the cache has none). */
function otelcolBinary(): Promise<string> {
  binary ??= installerOutput('install-otelcol.mjs');
  return binary;
}

function byKey(list: readonly OtlpKeyValue[] | undefined): Record<string, OtlpValue> {
  const out: Record<string, OtlpValue> = {};
  for (const { key, value } of list ?? []) out[key] = value;
  return out;
}

export class OtelCollector {
  private constructor(
    private readonly process: TiedProcess,
    /** The OTLP/HTTP traces URL to export to. */
    readonly tracesUrl: string,
    private readonly file: string,
  ) {}

  /** Starts a collector listening on 127.0.0.1:`port` (OTLP/HTTP), writing to `dir`/traces.json. */
  static async start(dir: string, port: number): Promise<OtelCollector> {
    const bin = await otelcolBinary();
    const file = join(dir, 'traces.json');
    const configPath = join(dir, 'otelcol.yaml');
    await writeFile(
      configPath,
      [
        'receivers:',
        '  otlp:',
        '    protocols:',
        '      http:',
        `        endpoint: 127.0.0.1:${port}`,
        'exporters:',
        '  file:',
        `    path: ${JSON.stringify(file)}`,
        '    flush_interval: 100ms',
        'service:',
        // Its own telemetry would listen on :8888; nothing of it is needed here.
        '  telemetry:',
        '    metrics:',
        '      level: none',
        '  pipelines:',
        '    traces:',
        '      receivers: [otlp]',
        '      exporters: [file]',
        '',
      ].join('\n'),
    );
    const process = new TiedProcess('otelcol', bin, ['--config', configPath], { logFile: join(dir, 'otelcol.log') });
    const collector = new OtelCollector(process, `http://127.0.0.1:${port}/v1/traces`, file);
    await waitUntil(
      async () => {
        if (!process.running) throw new Error(`the collector exited; see ${join(dir, 'otelcol.log')}`);
        return (await accepts(port)) ? true : undefined;
      },
      { description: `the collector listening on 127.0.0.1:${port}`, timeoutMs: 30_000, intervalMs: 50 },
    );
    return collector;
  }

  /** The raw file the collector wrote (empty before its first flush). */
  async fileText(): Promise<string> {
    try {
      return await readFile(this.file, 'utf8');
    } catch {
      return '';
    }
  }

  /** Every span the collector has written so far. */
  async spans(): Promise<CollectedSpan[]> {
    const out: CollectedSpan[] = [];
    for (const line of (await this.fileText()).split('\n')) {
      if (line.trim() === '') continue;
      const parsed = JSON.parse(line) as OtlpLine;
      for (const rs of parsed.resourceSpans ?? []) {
        const resource = byKey(rs.resource?.attributes);
        for (const ss of rs.scopeSpans ?? [])
          for (const span of ss.spans ?? [])
            out.push({
              traceId: span.traceId,
              spanId: span.spanId,
              parentSpanId: span.parentSpanId ?? '',
              traceState: span.traceState ?? '',
              name: span.name,
              attributes: byKey(span.attributes),
              events: (span.events ?? []).map((e) => ({ name: e.name, attributes: byKey(e.attributes) })),
              status: span.status ?? {},
              resource,
            });
      }
    }
    return out;
  }

  /** Freezes the process (SIGSTOP): the kernel still accepts connections, nothing answers them. */
  stall(): void {
    this.process.killGroup('SIGSTOP');
  }

  /** Ends the process for good (SIGKILL: a stalled process cannot act on TERM). */
  async kill(): Promise<void> {
    this.process.killGroup('SIGKILL');
    await this.process.whenExited();
  }

  async stop(): Promise<void> {
    this.process.killGroup('SIGCONT');
    await this.process.stop(5000);
  }
}

function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}
