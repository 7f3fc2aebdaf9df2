// The one reader of Prometheus text the tests use: llm-extproc's /metrics (over HTTP, or from an
// in-process registry's text) read into samples, a sample's value, and a wait for one to reach a
// value (counters are updated when a stream ends, which the client may see before llm-extproc does).

import type { Registry } from 'prom-client';
import { waitUntil } from './wait-until.js';

export interface Sample {
  readonly name: string;
  readonly labels: ReadonlyMap<string, string>;
  readonly value: number;
}

/** Every sample line of a Prometheus text exposition (comments and blank lines skipped). */
export function samples(text: string): Sample[] {
  const out: Sample[] = [];
  for (const line of text.split('\n')) {
    const match = /^([^{\s#]+)(?:\{(.*)\})?\s+(\S+)$/.exec(line);
    if (match === null) continue;
    const labels = new Map([...(match[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map((m) => [m[1], m[2]] as const));
    out.push({ name: match[1], labels, value: Number(match[3]) });
  }
  return out;
}

/** The first sample of `name` whose labels include `labels`; undefined when there is none. */
export function findSample(all: readonly Sample[], name: string, labels: Readonly<Record<string, string>> = {}): Sample | undefined {
  return all.find((s) => s.name === name && matches(s, labels));
}

/**
 * The sum over the samples of `name` whose labels include `labels` (0 when none does), e.g.
 * metricValue(text, 'llm_extproc_requests_total', { model: 'm', result: 'ok' }). A histogram's
 * count and sum are `<name>_count` and `<name>_sum`.
 */
export function metricValue(text: string, name: string, labels: Readonly<Record<string, string>> = {}): number {
  let total = 0;
  for (const sample of samples(text)) if (sample.name === name && matches(sample, labels)) total += sample.value;
  return total;
}

/** GET /metrics of an ops server (`port` on 127.0.0.1, or a base URL). */
export async function scrapeMetrics(ops: number | string): Promise<string> {
  const base = typeof ops === 'number' ? `http://127.0.0.1:${ops}` : ops;
  const response = await fetch(`${base}/metrics`);
  if (!response.ok) throw new Error(`${base}/metrics answered ${response.status}`);
  return response.text();
}

/** Waits until the sample `name{labels}` in what `scrape` returns reads `expected`. */
export async function waitForMetric(
  scrape: () => Promise<string>,
  name: string,
  labels: Readonly<Record<string, string>>,
  expected: number,
  description = `${name}${JSON.stringify(labels)} = ${expected}`,
): Promise<void> {
  await waitUntil(async () => (metricValue(await scrape(), name, labels) === expected ? true : undefined), { description });
}

function matches(sample: Sample, labels: Readonly<Record<string, string>>): boolean {
  for (const [key, value] of Object.entries(labels)) if (sample.labels.get(key) !== value) return false;
  return true;
}

/**
 * metricValue over an in-process registry (unit tests). A name the registry does not know throws,
 * so that a misspelt metric never reads as 0.
 */
export async function registryValue(registry: Registry, name: string, labels: Readonly<Record<string, string>> = {}): Promise<number> {
  const text = await registry.metrics();
  const base = name.replace(/_(count|sum|bucket)$/, '');
  if (registry.getSingleMetric(name) === undefined && registry.getSingleMetric(base) === undefined) {
    throw new Error(`metric ${name} is not registered`);
  }
  return metricValue(text, name, labels);
}
