// Simulation results as SVG bar charts: one panel per measure, one bar per run, labelled with
// their values. Plain SVG text (no library).

import type { SimResult } from './sim.js';

export interface Panel<T> {
  readonly title: string;
  readonly value: (r: T) => number;
  readonly format: (v: number) => string;
  /** Whether a higher bar is better (said under the panel title). */
  readonly higherIsBetter: boolean;
}

export interface ChartLayout {
  readonly panelWidth: number;
  readonly barWidth: number;
  /** Legend entries per line, and the width of each. */
  readonly legendColumns: number;
  readonly legendWidth: number;
}

const PICKER_PANELS: ReadonlyArray<Panel<SimResult>> = [
  { title: 'p99 queue wait (ms)', value: (r) => r.p99WaitMs, format: (v) => v.toFixed(0), higherIsBetter: false },
  { title: 'mean queue wait (ms)', value: (r) => r.meanWaitMs, format: (v) => v.toFixed(0), higherIsBetter: false },
  { title: 'p99 time to first token (ms)', value: (r) => r.p99TtftMs, format: (v) => v.toFixed(0), higherIsBetter: false },
  { title: 'cache hit ratio, blocks (%)', value: (r) => r.cacheHitRatio * 100, format: (v) => v.toFixed(1), higherIsBetter: true },
];

const COLORS = ['#9aa5b1', '#5b8def', '#2a9d5c', '#e0a030', '#c0504d', '#7b5ea7'];

function escape(text: string): string {
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}

export function renderBarChart<T>(
  rows: readonly T[],
  panels: ReadonlyArray<Panel<T>>,
  label: (r: T) => string,
  layout: ChartLayout,
): string {
  const { panelWidth, barWidth, legendColumns, legendWidth } = layout;
  const panelHeight = 220;
  const barArea = 150;
  const legendLines = Math.ceil(rows.length / legendColumns);
  const width = panelWidth * panels.length + 20;
  const height = panelHeight + 70 + (legendLines - 1) * 20;
  const parts: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="Helvetica, Arial, sans-serif" font-size="12">`,
    `<rect width="${width}" height="${height}" fill="#ffffff"/>`,
  ];
  panels.forEach((panel, p) => {
    const x0 = 10 + p * panelWidth;
    const max = Math.max(...rows.map(panel.value), 1e-9);
    parts.push(`<text x="${x0 + panelWidth / 2}" y="22" text-anchor="middle" font-weight="bold">${escape(panel.title)}</text>`);
    parts.push(
      `<text x="${x0 + panelWidth / 2}" y="38" text-anchor="middle" fill="#666">${panel.higherIsBetter ? 'higher is better' : 'lower is better'}</text>`,
    );
    const gap = (panelWidth - 20 - rows.length * barWidth) / (rows.length + 1);
    const baseY = 50 + barArea;
    parts.push(`<line x1="${x0 + 10}" y1="${baseY}" x2="${x0 + panelWidth - 10}" y2="${baseY}" stroke="#333"/>`);
    rows.forEach((r, i) => {
      const v = panel.value(r);
      const h = (v / max) * (barArea - 20);
      const x = x0 + 10 + gap + i * (barWidth + gap);
      parts.push(
        `<rect x="${x.toFixed(1)}" y="${(baseY - h).toFixed(1)}" width="${barWidth}" height="${h.toFixed(1)}" fill="${COLORS[i % COLORS.length]}"/>`,
      );
      parts.push(
        `<text x="${(x + barWidth / 2).toFixed(1)}" y="${(baseY - h - 4).toFixed(1)}" text-anchor="middle">${escape(panel.format(v))}</text>`,
      );
    });
  });
  rows.forEach((r, i) => {
    const x = 20 + (i % legendColumns) * legendWidth;
    const y = panelHeight + 40 + Math.floor(i / legendColumns) * 20;
    parts.push(`<rect x="${x}" y="${y - 10}" width="12" height="12" fill="${COLORS[i % COLORS.length]}"/>`);
    parts.push(`<text x="${x + 18}" y="${y}">${escape(label(r))}</text>`);
  });
  parts.push('</svg>');
  return `${parts.join('\n')}\n`;
}

/** The picking policies' chart (docs/picker-simulation.svg). */
export function renderSimulationSvg(results: readonly SimResult[]): string {
  return renderBarChart(results, PICKER_PANELS, (r) => r.policy, {
    panelWidth: 230,
    barWidth: 50,
    legendColumns: Math.max(1, results.length),
    legendWidth: 200,
  });
}
