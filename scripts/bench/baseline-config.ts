// The benchmark's baseline Envoy config: our shipped config (renderGatewayConfig) with the ext_proc
// HTTP filter, the llm_extproc cluster and the access log streamed to it deleted, and nothing else
// changed. Listener, route,
// retry policy, local-reply mappers, the backends cluster and its override_host policy (which
// falls back to least-request when no destination header is set) stay identical, so the only
// difference between the baseline and the llm-extproc setups is ext_proc itself.
// Deriving it (rather than rendering a second, hand-written config) means it cannot drift from
// the shipped one. Pure: a rendered config in, a new object out.

type Yaml = Record<string, unknown>;

const EXT_PROC_FILTER = 'envoy.filters.http.ext_proc';
const EXT_PROC_CLUSTER = 'llm_extproc';

function asRecord(value: unknown, what: string): Yaml {
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    throw new Error(`rendered Envoy config: ${what} is not a mapping`);
  return value as Yaml;
}

function asList(value: unknown, what: string): unknown[] {
  if (!Array.isArray(value)) throw new Error(`rendered Envoy config: ${what} is not a list`);
  return value as unknown[];
}

/** Throws when the config does not hold exactly one ext_proc filter and one llm_extproc cluster. */
export function withoutExtProc(config: Readonly<Yaml>): Yaml {
  const copy = structuredClone(config) as Yaml;
  const resources = asRecord(copy.static_resources, 'static_resources');
  let removedFilters = 0;
  for (const listener of asList(resources.listeners, 'listeners')) {
    for (const chain of asList(asRecord(listener, 'listener').filter_chains, 'filter_chains')) {
      for (const filter of asList(asRecord(chain, 'filter_chain').filters, 'filters')) {
        const hcm = asRecord(asRecord(filter, 'filter').typed_config, 'typed_config');
        const httpFilters = asList(hcm.http_filters, 'http_filters');
        const kept = httpFilters.filter((f) => asRecord(f, 'http_filter').name !== EXT_PROC_FILTER);
        removedFilters += httpFilters.length - kept.length;
        hcm.http_filters = kept;
        // The access log to llm-extproc (flagged streams only) goes with its cluster.
        if (hcm.access_log !== undefined) {
          const logs = asList(hcm.access_log, 'access_log').filter((log) => !JSON.stringify(log).includes(`"${EXT_PROC_CLUSTER}"`));
          if (logs.length === 0) delete hcm.access_log;
          else hcm.access_log = logs;
        }
      }
    }
  }
  const clusters = asList(resources.clusters, 'clusters');
  const keptClusters = clusters.filter((c) => asRecord(c, 'cluster').name !== EXT_PROC_CLUSTER);
  resources.clusters = keptClusters;
  if (removedFilters !== 1 || clusters.length - keptClusters.length !== 1) {
    throw new Error(
      `baseline: expected one ${EXT_PROC_FILTER} filter and one ${EXT_PROC_CLUSTER} cluster, found ${removedFilters} and ${clusters.length - keptClusters.length}`,
    );
  }
  return copy;
}
