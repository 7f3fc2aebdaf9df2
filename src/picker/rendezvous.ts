// Rendezvous (highest-random-weight) hashing: every endpoint gets a pseudo-random weight for a
// key, and the key belongs to the endpoint with the highest weight. Any replica of llm-extproc that
// sees the same endpoints computes the same owner, with no shared state; removing an endpoint
// moves only the keys it owned (each to its runner-up), adding one takes only the keys it now wins.

/** 32-bit FNV-1a of a string: the endpoint's identity in the hash, computed once per view. */
export function hashAddress(address: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < address.length; i++) h = Math.imul(h ^ address.charCodeAt(i), 0x01000193);
  return h >>> 0;
}

/**
 * Weight of `endpointHash` for `key`: a murmur3-style finaliser over the pair, so weights for
 * different endpoints are independent and uniformly spread. Pure integer maths, no allocation.
 */
export function rendezvousWeight(key: number, endpointHash: number): number {
  return mixedRendezvousWeight(key, mixEndpointHash(endpointHash));
}

/** The endpoint's half of its weight, which depends on no key: computed once per view by the picker. */
export function mixEndpointHash(endpointHash: number): number {
  return Math.imul(endpointHash, 0x9e3779b1);
}

/** `rendezvousWeight(key, h)` given `mixEndpointHash(h)`. */
export function mixedRendezvousWeight(key: number, mixedHash: number): number {
  let h = (key ^ mixedHash) >>> 0;
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b);
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
  // Every step is a bijection, so for one key distinct endpoint hashes never tie.
  return (h ^ (h >>> 16)) >>> 0;
}

/** Index of the owner of `key` among `endpointHashes` (−1 when empty). Ties go to the lower index. */
export function rendezvousOwner(key: number, endpointHashes: ArrayLike<number>): number {
  let best = -1;
  let bestWeight = -1;
  for (let i = 0; i < endpointHashes.length; i++) {
    const w = rendezvousWeight(key, endpointHashes[i]);
    if (w > bestWeight) {
      bestWeight = w;
      best = i;
    }
  }
  return best;
}
