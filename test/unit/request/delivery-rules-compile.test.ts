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

describe('delivery rules, as the compiler sees them', () => {
  it('compile as they are', () => {
    assert.deepEqual(ruleErrors(new Map()), []);
  });

  it('a request delivery added to its union without a rule: tsc fails on REQUEST_RULES, naming the delivery', () => {
    const modes = edit(source(BODY_MODES), REQUEST_UNION, REQUEST_UNION.replace(';', " | 'collect-grpc';"));
    const errors = ruleErrors(new Map([[BODY_MODES, modes]]));
    assert.equal(errors.length, 1, errors.join('\n'));
    assert.match(
      errors[0],
      /^TS2741: Property '"collect-grpc"' is missing in type .* but required in type 'RuleTable<RequestBodyDelivery, RequestRule>'/s,
    );
  });

  it('a response delivery added to its union without a rule: tsc fails on RESPONSE_RULES', () => {
    const modes = edit(source(BODY_MODES), RESPONSE_UNION, RESPONSE_UNION.replace(';', " | 'trailers-only';"));
    const errors = ruleErrors(new Map([[BODY_MODES, modes]]));
    assert.equal(errors.length, 1, errors.join('\n'));
    assert.match(
      errors[0],
      /^TS2741: Property '"trailers-only"' is missing in type .* but required in type 'RuleTable<ResponseBodyDelivery, ResponseRule>'/s,
    );
  });

  it('the same delivery with its row in the table compiles: the rule is the one other place to write', () => {
    const modes = edit(source(BODY_MODES), REQUEST_UNION, REQUEST_UNION.replace(';', " | 'collect-grpc';"));
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
