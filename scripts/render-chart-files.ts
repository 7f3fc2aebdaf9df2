// Writes the Helm chart's generated files (values.schema.json, files/envoy/*.yaml); see
// scripts/chart/chart-files.ts. A test fails when the committed copies drift.
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { chartFiles } from './chart/chart-files.js';
import { repoRoot } from './repo-root.js';

for (const [path, content] of chartFiles()) {
  const full = join(repoRoot(), path);
  mkdirSync(dirname(full), { recursive: true });
  writeFileSync(full, content);
  process.stdout.write(`wrote ${full}\n`);
}
