// The claim of src/request/delivery-rules.ts, checked by running the TypeScript compiler itself:
// a body delivery added to its union in extproc/body-modes.ts without a rule does not compile,
// and adding its row to the table is what makes it compile again. The compiler reads the real
// sources with the repository's tsconfig; only body-modes.ts (and, for the last case,
// delivery-rules.ts) is replaced in memory by the edited text a developer would write.

import assert from 'node:assert/strict';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import ts from 'typescript';
import { repoRoot } from '../../../scripts/repo-root.js';

const root = repoRoot();
const BODY_MODES = join(root, 'src/extproc/body-modes.ts');
const RULES = join(root, 'src/request/delivery-rules.ts');

function compilerOptions(): ts.CompilerOptions {
  const configPath = join(root, 'tsconfig.json');
  const read = ts.readConfigFile(configPath, (path) => ts.sys.readFile(path));
  if (read.error !== undefined) throw new Error(ts.flattenDiagnosticMessageText(read.error.messageText, '\n'));
  const parsed = ts.parseJsonConfigFileContent(read.config, ts.sys, root, { noEmit: true }, configPath);
  return parsed.options;
}

const options = compilerOptions();

/** The text of a source file as it is on disk. */
function source(path: string): string {
  const text = ts.sys.readFile(path);
  if (text === undefined) throw new Error(`cannot read ${path}`);
  return text;
}

/** `text` with `from` replaced by `to`, refusing an edit that no longer applies to the source. */
function edit(text: string, from: string, to: string): string {
  assert.ok(text.includes(from), `the source no longer contains ${JSON.stringify(from)}: update this test`);
  return text.replace(from, to);
}

/** Files as read from disk, parsed once for every program of this test (lib and @types/node are most of the time). */
const parsed = new Map<string, ts.SourceFile>();

/** Type errors of delivery-rules.ts, compiled with the files in `edited` replaced by their text. */
function ruleErrors(edited: ReadonlyMap<string, string>): string[] {
  const host = ts.createCompilerHost(options, true);
  const readFile = host.readFile.bind(host);
  const getSourceFile = host.getSourceFile.bind(host);
  host.readFile = (path) => edited.get(path) ?? readFile(path);
  host.getSourceFile = (path, language, onError, shouldCreate) => {
    const text = edited.get(path);
    if (text !== undefined) return ts.createSourceFile(path, text, language, true);
    let file = parsed.get(path);
    if (file === undefined) {
      file = getSourceFile(path, language, onError, shouldCreate);
      if (file !== undefined) parsed.set(path, file);
    }
    return file;
  };
  const program = ts.createProgram([RULES], options, host);
  const file = program.getSourceFile(RULES);
  assert.ok(file !== undefined, 'delivery-rules.ts is in the program');
  return [...program.getSyntacticDiagnostics(file), ...program.getSemanticDiagnostics(file)].map(
    (d) => `TS${d.code}: ${ts.flattenDiagnosticMessageText(d.messageText, '\n')}`,
  );
}

const REQUEST_UNION = "export type RequestBodyDelivery = 'envoy-buffers' | 'ask-for-buffered' | 'collect-streamed' | 'collect-duplex';";
const RESPONSE_UNION = "export type ResponseBodyDelivery = 'streamed' | 'buffered' | 'duplex' | 'none';";

/** body-modes.ts with `delivery` added to the union declared by `union`. */
const withDelivery = (union: string, delivery: string): string => edit(source(BODY_MODES), union, union.replace(';', ` | '${delivery}';`));

const NEW_DELIVERIES = [
  { side: 'request', union: REQUEST_UNION, delivery: 'collect-grpc', table: 'RuleTable<RequestBodyDelivery, RequestRule>' },
  { side: 'response', union: RESPONSE_UNION, delivery: 'trailers-only', table: 'RuleTable<ResponseBodyDelivery, ResponseRule>' },
];

describe('delivery rules, as the compiler sees them', () => {
  it('compile as they are', () => {
    assert.deepEqual(ruleErrors(new Map()), []);
  });

  for (const { side, union, delivery, table } of NEW_DELIVERIES) {
    it(`a ${side} delivery added to its union without a rule: tsc fails once, on its rule table, naming the delivery`, () => {
      const errors = ruleErrors(new Map([[BODY_MODES, withDelivery(union, delivery)]]));
      assert.equal(errors.length, 1, errors.join('\n'));
      assert.ok(errors[0].startsWith(`TS2741: Property '"${delivery}"' is missing in type `), errors[0]);
      assert.ok(errors[0].endsWith(`but required in type '${table}'.`), errors[0]);
    });
  }

  it('the same delivery with its row in the table compiles: the rule is the one other place to write', () => {
    const modes = withDelivery(REQUEST_UNION, 'collect-grpc');
    const rules = edit(
      source(RULES),
      "  'collect-duplex': { headers: 'hold', body: 'send-back', timed: false },\n",
      "  'collect-duplex': { headers: 'hold', body: 'send-back', timed: false },\n  'collect-grpc': { headers: 'hold', body: 'send-back', timed: false },\n",
    );
    assert.deepEqual(
      ruleErrors(
        new Map([
          [BODY_MODES, modes],
          [RULES, rules],
        ]),
      ),
      [],
    );
  });
});
