// Cuts a byte string at arbitrary points, for properties that must hold however a stream is chunked.

/** Splits `bytes` at the given cut points (taken modulo its length + 1; a repeated point gives no empty chunk). */
export function splitBytes(bytes: Buffer, cuts: readonly number[]): Buffer[] {
  const points = [...new Set(cuts.map((c) => (bytes.length === 0 ? 0 : c % (bytes.length + 1))))].sort((a, b) => a - b);
  const parts: Buffer[] = [];
  let start = 0;
  for (const p of points) {
    parts.push(bytes.subarray(start, p));
    start = p;
  }
  parts.push(bytes.subarray(start));
  return parts;
}
