// Verdict on a complete non-streaming response body that claims to be JSON. Runs once, at end of
// stream, on a body the processor already had to buffer; the slower diagnosis only runs when the
// body is broken.

import { isWellFormedJson } from './json-syntax.js';
import { OK_VERDICT } from './verdict.js';
import type { BodyVerdict } from './verdict.js';

export { isJsonContentType, isSseContentType } from './content-type.js';

function truncated(detail: string): BodyVerdict {
  return { ok: false, kind: 'truncated_response', detail };
}

export function inspectJsonBody(body: Buffer): BodyVerdict {
  // Nearly every answer is well-formed: say so from its bytes, without decoding or parsing it.
  if (isWellFormedJson(body)) return OK_VERDICT;
  const text = body.toString('utf8');
  if (text.trim() === '') return truncated(body.length === 0 ? 'body is empty' : `body is only whitespace (${body.length} bytes)`);
  try {
    JSON.parse(text);
    return OK_VERDICT;
  } catch {
    return truncated(describeInvalidJson(text, body.length));
  }
}

/**
 * Why `text` is not JSON, in words: where it stopped if it was cut short, or what it looks like
 * otherwise. Tracks only strings and nesting, which is enough to tell a truncation from garbage.
 */
function describeInvalidJson(text: string, byteLength: number): string {
  const first = text.trimStart().charAt(0);
  if (first === '<') return `body is not JSON: it looks like HTML or XML (${byteLength} bytes)`;
  if (!/^[[{"\-0-9tfn]$/.test(first)) return `body is not JSON: it starts with ${JSON.stringify(first)} (${byteLength} bytes)`;
  const open: string[] = [];
  let inString = false;
  let escaped = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (escaped) escaped = false;
      else if (c === 0x5c /* \ */) escaped = true;
      else if (c === 0x22 /* " */) inString = false;
      continue;
    }
    if (c === 0x22) inString = true;
    else if (c === 0x7b /* { */ || c === 0x5b /* [ */) open.push(c === 0x7b ? 'object' : 'array');
    else if (c === 0x7d /* } */ || c === 0x5d /* ] */) {
      if (open.pop() !== (c === 0x7d ? 'object' : 'array')) return `body is not valid JSON: mismatched bracket (${byteLength} bytes)`;
    }
  }
  if (inString) return `body ended after ${byteLength} bytes inside a JSON string`;
  const innermost = open.at(-1);
  if (innermost !== undefined) return `body ended after ${byteLength} bytes inside a JSON ${innermost}`;
  return `body is not valid JSON (${byteLength} bytes)`;
}
