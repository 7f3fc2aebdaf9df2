#!/usr/bin/env node
// Makes sure a Python with the official `openai` SDK 3.60.0 is available for the cut-streams test
// (what the Python SDK raises when a stream is cut, docs/errors.md) and prints its path.
//
// Order: $OPENAI_PYTHON (if set it must import openai 3.60.0; an explicit choice is never silently
// ignored), then the venv in the tools cache `${LLM_EXTPROC_TOOLS_DIR:-$HOME/.cache/llm-extproc}/
// openai-python-3.60.0/`, then a fresh one: `python3 -m venv` and `pip install` of the SDK with every
// dependency pinned to the versions the test was written against (a PyPI download of about 15 MB;
// 71 MB on disk). The cache lives outside the clone so every clone and CI run reuses it.
//
// Plain Node ESM with no dependencies because it runs before the TypeScript build exists.
// Quiet on success except one stdout line with the Python path; exit code 1 with a message on failure.

import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { buildInStaging, InstallError, runCaptured, runChecked, runInstaller, toolsDir } from './install-common.mjs';

const OPENAI_VERSION = '3.60.0';
/** openai's dependency tree as measured; httpx2's error class is what the test asserts. */
const PINNED = [
  `openai==${OPENAI_VERSION}`,
  'annotated-types==0.8.0',
  'anyio==4.16.0',
  'h11==0.16.0',
  'httpcore2==2.16.2',
  'httpx2==2.16.2',
  'idna==3.20',
  'jiter==0.19.0',
  'pydantic==2.14.4',
  'pydantic_core==2.50.5',
  'sniffio==1.3.1',
  'truststore==0.10.5',
  'typing_extensions==4.16.0',
  'typing-inspection==0.4.5',
];

function importsWantedOpenai(python) {
  const res = runCaptured(python, ['-c', 'import openai; print(openai.__version__)']);
  return !res.error && res.status === 0 && `${res.stdout}`.trim() === OPENAI_VERSION;
}

function main() {
  const fromEnv = process.env.OPENAI_PYTHON;
  if (fromEnv) {
    if (!importsWantedOpenai(fromEnv)) throw new InstallError(`OPENAI_PYTHON=${fromEnv} does not import openai ${OPENAI_VERSION}`);
    return fromEnv;
  }
  const venv = join(toolsDir(), `openai-python-${OPENAI_VERSION}`);
  const python = join(venv, 'bin', 'python');
  if (importsWantedOpenai(python)) return python;
  rmSync(venv, { recursive: true, force: true });
  buildInStaging(venv, (staging) => {
    const built = join(staging, 'venv');
    runChecked('python3', ['-m', 'venv', built]);
    runChecked(join(built, 'bin', 'python'), ['-m', 'pip', 'install', '--quiet', '--disable-pip-version-check', '--no-deps', ...PINNED]);
    return built;
  });
  if (!importsWantedOpenai(python)) throw new InstallError(`made ${venv} but its Python does not import openai ${OPENAI_VERSION}`);
  return python;
}

runInstaller('install-openai-python', main);
