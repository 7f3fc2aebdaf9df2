// Writes docs/errors.md from the code (`npm run docs:errors`). Runs from dist/scripts/ after a
// build; the path is resolved from this file so the working directory does not matter.

import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { renderErrorDocs } from '../tools/error-docs.js';

const target = fileURLToPath(new URL('../../docs/errors.md', import.meta.url));
writeFileSync(target, renderErrorDocs());
process.stdout.write(`wrote ${target}\n`);
