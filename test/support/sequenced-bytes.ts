// Test bodies whose every part is distinct: a body of one repeated letter stays the same when its
// chunks are reordered, dropped and replaced by copies, or swapped, so a test comparing it proves
// little. Here each 16-byte record names its own offset (JSON-safe ASCII, so it can sit in a
// prompt), and bodies are compared by SHA-256 with the first differing record in the message.

import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';

const RECORD = 16;

/** `bytes` characters: `000000000000000 000000000000010 …`, each record its offset in hex, then a space. */
export function sequencedText(bytes: number): string {
  let text = '';
  for (let offset = 0; offset < bytes; offset += RECORD) text += `${offset.toString(16).padStart(RECORD - 1, '0')} `;
  return text.slice(0, bytes);
}

export function sha256(data: Buffer | string): string {
  return createHash('sha256').update(data).digest('hex');
}

/** `undefined` when equal, else where they first differ and what each holds there. */
function firstDifference(actual: Buffer, expected: Buffer): string | undefined {
  if (actual.equals(expected)) return undefined;
  let at = 0;
  while (at < actual.length && at < expected.length && actual[at] === expected[at]) at++;
  const around = (b: Buffer): string => JSON.stringify(b.subarray(Math.max(0, at - 8), at + 24).toString('latin1'));
  return `${actual.length} bytes vs ${expected.length} expected; first difference at byte ${at}: got ${around(actual)}, expected ${around(expected)}`;
}

/** Fails unless both hold the same bytes (compared by SHA-256), naming `what` and the first difference. */
export function assertSameBytes(actual: Buffer, expected: Buffer, what: string): void {
  assert.equal(sha256(actual), sha256(expected), `${what}: ${firstDifference(actual, expected) ?? 'equal'}`);
}
