// JSON as strict log pipelines read it: RFC 8259 grammar (JSON.parse) and no object with the same
// key twice. JSON.parse keeps the last of duplicate keys without a word (a reviver only sees the
// survivor), so a second pass walks the text with jsonc-parser's scanner, which reports every
// property as written, escapes decoded ("a" and "\u0061" are one key).

import { visit } from 'jsonc-parser';

export class StrictJsonError extends Error {
  override readonly name = 'StrictJsonError';
}

export function parseStrictJson(text: string): unknown {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw new StrictJsonError(`not JSON: ${(err as Error).message}`, { cause: err });
  }
  const open: Array<Set<string>> = [];
  visit(
    text,
    {
      onObjectBegin: () => void open.push(new Set()),
      onObjectEnd: () => void open.pop(),
      onObjectProperty: (name, offset) => {
        const keys = open[open.length - 1];
        if (keys.has(name)) throw new StrictJsonError(`duplicate key ${JSON.stringify(name)} at offset ${offset}`);
        keys.add(name);
      },
    },
    { disallowComments: true, allowTrailingComma: false },
  );
  return value;
}
