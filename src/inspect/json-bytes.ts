// The byte values of JSON's structural characters, for the scanners that read JSON text without
// decoding it (json-syntax.ts, usage.ts, request/usage-injection.ts).

export const QUOTE = 0x22;
export const BACKSLASH = 0x5c;
export const COMMA = 0x2c;
export const COLON = 0x3a;
export const OPEN_OBJECT = 0x7b;
export const CLOSE_OBJECT = 0x7d;
export const OPEN_ARRAY = 0x5b;
export const CLOSE_ARRAY = 0x5d;

/** JSON's four whitespace characters (RFC 8259 `ws`). */
export function isJsonWhitespace(c: number): boolean {
  return c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;
}
