#!/usr/bin/env node
// Prints one plain closing line ("tests: N passed, N failed") from the TAP file the test run
// wrote next to its human-readable output, so any CI log reader can tell what ran.
import { readFileSync } from 'node:fs';

const tap = readFileSync(process.argv[2] ?? '.cache/test-results.tap', 'utf8');
const last = (name) => {
  const line = tap.split('\n').filter((l) => l.startsWith(`# ${name} `)).at(-1);
  return line === undefined ? 0 : Number(line.slice(name.length + 3));
};
const skipped = last('skipped') + last('todo');
process.stdout.write(`tests: ${last('pass')} passed, ${last('fail') + last('cancelled')} failed${skipped > 0 ? `, ${skipped} skipped` : ''}\n`);
