// Envoy's response flags as the `response.flags` attribute delivers them: a bitmask where the
// flag with index i in Envoy's `CoreResponseFlag` enum (envoy/stream_info/stream_info.h) sets
// bit `1 << i` (StreamInfoImpl::legacyResponseFlags). The ext_proc attribute arrives as a
// google.protobuf.Value number (CEL int64 exported as double); every bit used here is < 2^53.
// The short names are the ones Envoy prints in access logs (%RESPONSE_FLAGS%).

export const RESPONSE_FLAGS = {
  /** FailedLocalHealthCheck */
  LH: 1 << 0,
  /** NoHealthyUpstream */
  UH: 1 << 1,
  /** UpstreamRequestTimeout */
  UT: 1 << 2,
  /** LocalReset */
  LR: 1 << 3,
  /** UpstreamRemoteReset */
  UR: 1 << 4,
  /** UpstreamConnectionFailure */
  UF: 1 << 5,
  /** UpstreamConnectionTermination */
  UC: 1 << 6,
  /** UpstreamOverflow (circuit breaker) */
  UO: 1 << 7,
  /** NoRouteFound */
  NR: 1 << 8,
  /** DelayInjected */
  DI: 1 << 9,
  /** FaultInjected */
  FI: 1 << 10,
  /** RateLimited */
  RL: 1 << 11,
  /** UnauthorizedExternalService */
  UAEX: 1 << 12,
  /** RateLimitServiceError */
  RLSE: 1 << 13,
  /** DownstreamConnectionTermination */
  DC: 1 << 14,
  /** UpstreamRetryLimitExceeded */
  URX: 1 << 15,
  /** StreamIdleTimeout */
  SI: 1 << 16,
  /** InvalidEnvoyRequestHeaders */
  IH: 1 << 17,
  /** DownstreamProtocolError */
  DPE: 1 << 18,
  /** UpstreamMaxStreamDurationReached */
  UMSDR: 1 << 19,
  /** ResponseFromCacheFilter */
  RFCF: 1 << 20,
  /** NoFilterConfigFound */
  NFCF: 1 << 21,
  /** DurationTimeout */
  DT: 1 << 22,
  /** UpstreamProtocolError */
  UPE: 1 << 23,
  /** NoClusterFound */
  NC: 1 << 24,
  /** OverloadManager */
  OM: 1 << 25,
  /** DnsResolutionFailed */
  DF: 1 << 26,
  /** DropOverLoad */
  DO: 1 << 27,
  /** DownstreamRemoteReset */
  DR: 1 << 28,
  /** UnconditionalDropOverload (newer Envoy versions) */
  UDO: 1 << 29,
} as const;

export type ResponseFlagName = keyof typeof RESPONSE_FLAGS;

export function hasResponseFlag(flags: number, name: ResponseFlagName): boolean {
  // Bitwise ops in JS work on 32-bit ints; all our bits are below 2^30, so this is exact.
  return (flags & RESPONSE_FLAGS[name]) !== 0;
}

/** Names of the set flags in Envoy's order, e.g. `['UF', 'URX']` — for logs. */
export function responseFlagNames(flags: number): ResponseFlagName[] {
  const names: ResponseFlagName[] = [];
  for (const name of Object.keys(RESPONSE_FLAGS) as ResponseFlagName[]) {
    if (hasResponseFlag(flags, name)) names.push(name);
  }
  return names;
}
