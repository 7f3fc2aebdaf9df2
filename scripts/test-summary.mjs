#!/usr/bin/env node
// Prints one plain closing line ("tests: N passed, N failed") from the TAP file the test run
// wrote next to its human-readable output, so any CI log reader can tell what ran.
// `--clear` removes the file before a run: a run that fails before its tests start (build, Envoy
// install) must not be summarised with an earlier run's results.
import { readFileSync, rmSync } from 'node:fs';

const args = process.argv.slice(2);
const clear = args.includes('--clear');
const file = args.find((a) => a !== '--clear') ?? '.cache/test-results.tap';
if (clear) {
  rmSync(file, { force: true });
  process.exit(0);
}
let tap;
try {
  tap = readFileSync(file, 'utf8');
} catch (err) {
  if (err.code !== 'ENOENT') throw err;
  process.stdout.write('tests: none ran (the run failed before the tests started; see above)\n');
  process.exit(1);
}
const last = (name) => {
  const line = tap
    .split('\n')
    .filter((l) => l.startsWith(`# ${name} `))
    .at(-1);
  return line === undefined ? 0 : Number(line.slice(name.length + 3));
};
const skipped = last('skipped') + last('todo');
process.stdout.write(
  `tests: ${last('pass')} passed, ${last('fail') + last('cancelled')} failed${skipped > 0 ? `, ${skipped} skipped` : ''}\n`,
);
