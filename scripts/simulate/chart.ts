// The simulation results as an SVG bar chart: one panel per measure, one bar per policy.
// Plain SVG text (no library): four panels of three bars, labelled with their values.

import type { SimResult } from './sim.js';

interface Panel {
  readonly title: string;
  readonly value: (r: SimResult) => number;
  readonly format: (v: number) => string;
  /** Whether a higher bar is better (said in the panel title). */
  readonly higherIsBetter: boolean;
}

const PANELS: readonly Panel[] = [
  { title: 'p99 queue wait (ms)', value: (r) => r.p99WaitMs, format: (v) => v.toFixed(0), higherIsBetter: false },
  { title: 'mean queue wait (ms)', value: (r) => r.meanWaitMs, format: (v) => v.toFixed(0), higherIsBetter: false },
  { title: 'p99 time to first token (ms)', value: (r) => r.p99TtftMs, format: (v) => v.toFixed(0), higherIsBetter: false },
  { title: 'cache hit ratio, blocks (%)', value: (r) => r.cacheHitRatio * 100, format: (v) => v.toFixed(1), higherIsBetter: true },
];

const COLORS = ['#9aa5b1', '#5b8def', '#2a9d5c'];

function escape(text: string): string {
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}

export function renderSimulationSvg(results: readonly SimResult[]): string {
  const panelWidth = 230;
  const panelHeight = 220;
  const barArea = 150;
  const width = panelWidth * PANELS.length + 20;
  const height = panelHeight + 70;
  const parts: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="Helvetica, Arial, sans-serif" font-size="12">`,
    `<rect width="${width}" height="${height}" fill="#ffffff"/>`,
  ];
  PANELS.forEach((panel, p) => {
    const x0 = 10 + p * panelWidth;
    const max = Math.max(...results.map(panel.value), 1e-9);
    parts.push(`<text x="${x0 + panelWidth / 2}" y="22" text-anchor="middle" font-weight="bold">${escape(panel.title)}</text>`);
    parts.push(
      `<text x="${x0 + panelWidth / 2}" y="38" text-anchor="middle" fill="#666">${panel.higherIsBetter ? 'higher is better' : 'lower is better'}</text>`,
    );
    const barWidth = 50;
    const gap = (panelWidth - 20 - results.length * barWidth) / (results.length + 1);
    const baseY = 50 + barArea;
    parts.push(`<line x1="${x0 + 10}" y1="${baseY}" x2="${x0 + panelWidth - 10}" y2="${baseY}" stroke="#333"/>`);
    results.forEach((r, i) => {
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
  const legendY = panelHeight + 40;
  results.forEach((r, i) => {
    const x = 20 + i * 200;
    parts.push(`<rect x="${x}" y="${legendY - 10}" width="12" height="12" fill="${COLORS[i % COLORS.length]}"/>`);
    parts.push(`<text x="${x + 18}" y="${legendY}">${escape(r.policy)}</text>`);
  });
  parts.push('</svg>');
  return `${parts.join('\n')}\n`;
}
