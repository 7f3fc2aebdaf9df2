// Names shared with Envoy's configuration and the Gateway API Inference Extension protocol, so
// users can swap endpoint pickers without touching their Envoy config.

export const DESTINATION_HEADER = 'x-gateway-destination-endpoint';
export const DESTINATION_METADATA_NAMESPACE = 'envoy.lb';
/** Where a gateway reports the host that really served the request (Istio: `envoy.lb` metadata). */
export const SERVED_ENDPOINT_KEY = 'x-gateway-destination-endpoint-served';
/**
 * Ours: the address of the llm-extproc replica that picked the request (`listen.peerAddress`), in
 * `envoy.lb` beside the pick, so Envoy's access-log entry of the stream names the replica that holds
 * it, whichever replica the entry reaches (access-log-routing.ts). `envoy.lb` because it is the one
 * namespace every gateway lets ext_proc write.
 */
export const REPLICA_KEY = 'x-llm-extproc-replica';
/** The gateway's subset hint: only these endpoints may be picked (endpoint-picker protocol). */
export const SUBSET_HINT_NAMESPACE = 'envoy.lb.subset_hint';
export const SUBSET_HINT_KEY = 'x-gateway-destination-endpoint-subset';

/** The gRPC service Envoy calls; also the name our health service answers for. */
export const EXT_PROC_SERVICE_NAME = 'envoy.service.ext_proc.v3.ExternalProcessor';

// llm-d's router (llm-d/llm-d-router, the Inference Extension's endpoint picker since 2026) renamed
// the request headers it reads; clients and gateways written for either name keep working here.
// (The objective and fairness headers' names are settings: picker/settings.ts has their defaults.)
export const MODEL_NAME_REWRITE_HEADER = 'x-llm-d-model-name-rewrite';

/** llm-d's header names → the `x-gateway-*` names they replaced, still read when the new one is absent. */
export const LEGACY_HEADER_ALIASES: ReadonlyMap<string, string> = new Map([
  ['x-llm-d-inference-objective', 'x-gateway-inference-objective'],
  ['x-llm-d-inference-fairness-id', 'x-gateway-inference-fairness-id'],
  [MODEL_NAME_REWRITE_HEADER, 'x-gateway-model-name-rewrite'],
]);
