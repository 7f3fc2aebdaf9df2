// Runs h2spec (github.com/summerwind/h2spec, the HTTP/2 conformance tester) against a listener and
// reads its JUnit report. `scripts/install-h2spec.mjs` builds the binary into the tools cache (npm
// test and .ci/run run it first) and prints its path; here we run it and read that line, so a
// machine that has the binary answers in well under a second.

import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { repoRoot } from '../../scripts/repo-root.js';

let pending: Promise<string> | undefined;

function run(cmd: string, args: readonly string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    execFile(cmd, args, { maxBuffer: 16 * 1024 * 1024 }, (err, stdout, stderr) => {
      if (err !== null && typeof err.code !== 'number') reject(new Error(`cannot run ${cmd}: ${err.message}`));
      else resolve({ code: err === null ? 0 : Number(err.code), stdout, stderr });
    });
  });
}

/** The h2spec binary's path (built on first use if the cache has none). */
export function h2specBinary(): Promise<string> {
  pending ??= run(process.execPath, [join(repoRoot(), 'scripts', 'install-h2spec.mjs')]).then(({ code, stdout, stderr }) => {
    const path = stdout.trim().split('\n').at(-1);
    if (code !== 0 || path === undefined || path === '') throw new Error(`scripts/install-h2spec.mjs exited ${code}: ${stderr}`);
    return path;
  });
  return pending;
}

export interface H2specCase {
  /** The RFC section's package ("http2/8.1.2.2", "generic/3.1", "hpack/4.2"). */
  readonly section: string;
  readonly title: string;
  readonly outcome: 'passed' | 'failed' | 'skipped';
  /** h2spec's account of a failure (expected vs actual), for the assertion message. */
  readonly detail: string;
}

export interface H2specRun {
  readonly cases: readonly H2specCase[];
  /** h2spec's own stdout (its human-readable report). */
  readonly output: string;
}

const CASE = /<testcase package="([^"]*)" classname="([^"]*)"[^>]*>(.*?)<\/testcase>/gs;

function unescapeXml(text: string): string {
  return text
    .replaceAll('&lt;', '<')
    .replaceAll('&gt;', '>')
    .replaceAll('&quot;', '"')
    .replaceAll('&#39;', "'")
    .replaceAll('&#xA;', '\n')
    .replaceAll('&amp;', '&');
}

/** Runs every test case (`strict`: the strict ones too) against host:port, over TLS when `tls`. */
export async function runH2spec(options: { host: string; port: number; tls: boolean; strict: boolean }): Promise<H2specRun> {
  const bin = await h2specBinary();
  const dir = await mkdtemp(join(tmpdir(), 'llm-extproc-h2spec-'));
  try {
    const report = join(dir, 'report.xml');
    const args = ['-h', options.host, '-p', String(options.port), '-o', '5', '-j', report];
    if (options.tls) args.push('-t', '-k');
    if (options.strict) args.push('-S');
    // Exit code 1 means "some case failed": the report says which, so it is read either way.
    const { stdout, stderr } = await run(bin, args);
    let xml: string;
    try {
      xml = await readFile(report, 'utf8');
    } catch (err) {
      throw new Error(`h2spec wrote no report: ${stdout}${stderr}`, { cause: err });
    }
    const cases = [...xml.matchAll(CASE)].map(([, section = '', title = '', body = '']): H2specCase => {
      const outcome = body.includes('<failure') || body.includes('<error') ? 'failed' : body.includes('<skipped') ? 'skipped' : 'passed';
      return { section, title: unescapeXml(title), outcome, detail: unescapeXml(body.trim()) };
    });
    return { cases, output: stdout };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
