// The request body with its top-level `model` changed in place (model rewrite): every other byte
// reaches the model server as the client wrote it, as with the usage injection (usage-injection.ts,
// whose byte scanning this shares).

import { CLOSE_OBJECT, OPEN_OBJECT, QUOTE, isJsonWhitespace } from '../inspect/json-bytes.js';
import { memberValue, replaceSpan, skipWhitespace } from './usage-injection.js';

const MODEL = Buffer.from('"model"');

/** `body` with `"model": <model>`, or undefined when its `model` is not a plain string member (then nothing is changed). */
export function withModel(body: Buffer, model: string): Buffer | undefined {
  const start = skipWhitespace(body, 0, body.length);
  let end = body.length;
  while (end > start && isJsonWhitespace(body[end - 1])) end--;
  if (body[start] !== OPEN_OBJECT || body[end - 1] !== CLOSE_OBJECT) return undefined;
  const value = memberValue(body, { start, end }, MODEL);
  if (value === undefined || body[value.start] !== QUOTE) return undefined;
  return replaceSpan(body, value, JSON.stringify(model));
}
