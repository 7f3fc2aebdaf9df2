// The one way to turn a caught value (`unknown` under useUnknownInCatchVariables) into text for a
// log line or an error message (an Error's message, anything else stringified), or into an Error.

export function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** The first line of a message (a YAML parser's error carries a code frame below it): log lines and exit messages stay one line. */
export function firstLine(message: string): string {
  return message.split('\n', 1)[0].replace(/:$/, '');
}

export function asError(thrown: unknown): Error {
  return thrown instanceof Error ? thrown : new Error(String(thrown));
}
