// Names shared with Envoy's configuration and the Gateway API Inference Extension protocol, so
// users can swap endpoint pickers without touching their Envoy config.

export const DESTINATION_HEADER = 'x-gateway-destination-endpoint';
export const DESTINATION_METADATA_NAMESPACE = 'envoy.lb';
/** Set on every error we render, so operators can grep for our answers and Envoy can tell them apart. */
export const ERROR_HEADER = 'x-llm-extproc-error';

/** The gRPC service Envoy calls; also the name our health service answers for. */
export const EXT_PROC_SERVICE_NAME = 'envoy.service.ext_proc.v3.ExternalProcessor';
