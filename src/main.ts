#!/usr/bin/env node
// Process entry: the memory settings first (process-settings.ts; some only take effect before the
// heap fills), then the program (program.ts), loaded only afterwards so that its hundreds of
// modules are already read under those settings.

import { applyProcessSettings } from './process-settings.js';

applyProcessSettings();
await import('./program.js');
