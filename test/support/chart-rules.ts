// The chart's alert and recording rules as `helm template` renders them (the PrometheusRule an
// operator installs), for the rule evaluator: each rule's name, expression and `for:` in seconds.

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { repoRoot } from '../../scripts/repo-root.js';
import { CHART_DIR } from '../../scripts/chart/chart-files.js';
import { helm, parseManifests } from './helm.js';
import type { K8sObject } from './helm.js';

export interface ChartRule {
  readonly name: string;
  readonly alert: boolean;
  readonly expr: string;
  readonly forSeconds: number;
}

interface RuleSpec {
  readonly alert?: string;
  readonly record?: string;
  readonly expr: string;
  readonly for?: string;
}

/** The rules of a rendered PrometheusRule, every group's, in order. */
export function rulesOf(prometheusRule: K8sObject): ChartRule[] {
  const spec = prometheusRule['spec'] as { groups: Array<{ rules: RuleSpec[] }> };
  return spec.groups.flatMap((group) =>
    group.rules.map((rule) => ({
      name: rule.alert ?? rule.record ?? '',
      alert: rule.alert !== undefined,
      expr: rule.expr,
      forSeconds: durationSeconds(rule.for ?? '0s'),
    })),
  );
}

/** `helm template` with the PrometheusRule on (and `--set` values): its rules. */
export async function renderedRules(set: readonly string[] = []): Promise<ChartRule[]> {
  const home = mkdtempSync(join(tmpdir(), 'chart-rules-'));
  try {
    const args = ['template', 'r', join(repoRoot(), CHART_DIR), '--set', 'metrics.prometheusRule.enabled=true'];
    const res = await helm([...args, ...set.flatMap((s) => ['--set', s]), '--show-only', 'templates/prometheusrule.yaml'], home);
    if (res.code !== 0) throw new Error(`helm template failed:\n${res.stderr}`);
    const rule = parseManifests(res.stdout).find((o) => o.kind === 'PrometheusRule');
    if (rule === undefined) throw new Error('helm template rendered no PrometheusRule');
    return rulesOf(rule);
  } finally {
    rmSync(home, { recursive: true, force: true });
  }
}

/** A Prometheus duration as the chart writes them (one unit: 0m, 5m, 10m, 90s). */
function durationSeconds(text: string): number {
  const m = /^(\d+)(s|m|h)$/.exec(text);
  if (m === null) throw new Error(`duration outside what the chart writes: ${text}`);
  return Number(m[1]) * (m[2] === 's' ? 1 : m[2] === 'm' ? 60 : 3600);
}
