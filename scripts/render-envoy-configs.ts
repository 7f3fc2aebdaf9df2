// Writes the shipped Envoy configurations into envoy/.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { SHIPPED_CONFIGS, renderShippedConfig } from '../tools/envoy-config/shipped-configs.js';
import { repoRoot } from './repo-root.js';

for (const config of SHIPPED_CONFIGS) {
  const path = join(repoRoot(), 'envoy', config.file);
  writeFileSync(path, renderShippedConfig(config));
  process.stdout.write(`wrote ${path}\n`);
}
