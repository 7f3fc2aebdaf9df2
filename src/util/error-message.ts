// The one way to turn a caught value (`unknown` under useUnknownInCatchVariables) into text for a
// log line or an error message (an Error's message, anything else stringified), or into an Error.

export function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

export function asError(thrown: unknown): Error {
  return thrown instanceof Error ? thrown : new Error(String(thrown));
}
