// Names shared with Envoy's configuration and the Gateway API Inference Extension protocol, so
// users can swap endpoint pickers without touching their Envoy config.

export const DESTINATION_HEADER = 'x-gateway-destination-endpoint';
export const DESTINATION_METADATA_NAMESPACE = 'envoy.lb';
/** Where a gateway reports the host that really served the request (Istio: `envoy.lb` metadata). */
export const SERVED_ENDPOINT_KEY = 'x-gateway-destination-endpoint-served';
/** The gateway's subset hint: only these endpoints may be picked (endpoint-picker protocol). */
export const SUBSET_HINT_NAMESPACE = 'envoy.lb.subset_hint';
export const SUBSET_HINT_KEY = 'x-gateway-destination-endpoint-subset';

/** The gRPC service Envoy calls; also the name our health service answers for. */
export const EXT_PROC_SERVICE_NAME = 'envoy.service.ext_proc.v3.ExternalProcessor';
