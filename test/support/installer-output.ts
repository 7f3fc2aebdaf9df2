// Runs one of scripts/install-*.mjs and returns the last line it printed (the installers print their
// result, a path or a JSON line, last). A missing tool is built on first use, with progress on our
// stderr; a tool already in the cache answers in well under a second.

import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { repoRoot } from '../../scripts/repo-root.js';

export function installerOutput(script: string, args: readonly string[] = []): Promise<string> {
  return new Promise<string>((resolve, reject) => {
    const child = spawn(process.execPath, [join(repoRoot(), 'scripts', script), ...args], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.setEncoding('utf8');
    child.stdout.on('data', (chunk: string) => (out += chunk));
    child.once('error', reject);
    child.once('exit', (code) => {
      const last = out.trim().split('\n').at(-1) ?? '';
      if (code === 0 && last !== '') resolve(last);
      else reject(new Error(`scripts/${script} exited ${code}${out === '' ? '' : `: ${out}`}`));
    });
  });
}
