// The pod annotation and label llm-d's router reads, each before the Inference Extension's
// `inference.networking.k8s.io/*` key it replaced (still honoured when only that one is set).

/** Which of the pool's target ports the pod serves on, comma-separated. */
export const ACTIVE_PORTS_ANNOTATIONS = ['llm-d.ai/active-ports', 'inference.networking.k8s.io/active-ports'] as const;
/** The model server's engine (`vllm`, `sglang`, ...): which metrics flavour to scrape the pod as. */
export const ENGINE_TYPE_LABELS = ['llm-d.ai/engine-type', 'inference.networking.k8s.io/engine-type'] as const;
