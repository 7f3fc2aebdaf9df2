// Reading Envoy's `/config_dump` (JSON): the listeners, clusters and routes a controller sent over
// xDS, and the same pieces of a bootstrap we render ourselves (gateway profiles), so tests can hold
// one against the other field by field.

export type Json = Record<string, unknown>;

export interface ConfigDump {
  readonly configs: ReadonlyArray<Json & { '@type': string }>;
}

function section(dump: ConfigDump, type: string): Json {
  return dump.configs.find((c) => c['@type'] === `type.googleapis.com/envoy.admin.v3.${type}`) ?? {};
}

function list(value: unknown): Json[] {
  return Array.isArray(value) ? (value as Json[]) : [];
}

/** Every listener: static ones as they are, dynamic ones from their active state. */
export function dumpListeners(dump: ConfigDump): Json[] {
  const listeners = section(dump, 'ListenersConfigDump');
  return [
    ...list(listeners['static_listeners']).map((l) => l['listener'] as Json),
    ...list(listeners['dynamic_listeners']).map((l) => (l['active_state'] as Json | undefined)?.['listener'] as Json),
  ].filter((l) => l !== undefined);
}

export function dumpClusters(dump: ConfigDump): Json[] {
  const clusters = section(dump, 'ClustersConfigDump');
  return [...list(clusters['static_clusters']), ...list(clusters['dynamic_active_clusters'])].map((c) => c['cluster'] as Json);
}

export function dumpRoutes(dump: ConfigDump): Json[] {
  const routes = section(dump, 'RoutesConfigDump');
  return [...list(routes['static_route_configs']), ...list(routes['dynamic_route_configs'])]
    .map((r) => r['route_config'] as Json)
    .flatMap((config) => list(config['virtual_hosts']).flatMap((vh) => list(vh['routes'])));
}

/** The HTTP connection manager of a listener's first filter chain. */
export function connectionManager(listener: Json): Json {
  const chain = list(listener['filter_chains'])[0] ?? (listener['default_filter_chain'] as Json | undefined) ?? {};
  const hcm = list(chain['filters']).find((f) => f['name'] === 'envoy.filters.network.http_connection_manager');
  return (hcm?.['typed_config'] as Json | undefined) ?? {};
}

/** A bootstrap object of ours (gateway-profiles.ts) in the same shape as a config dump. */
export function bootstrapAsDump(bootstrap: Json): ConfigDump {
  const resources = (bootstrap['static_resources'] as Json | undefined) ?? {};
  return {
    configs: [
      {
        '@type': 'type.googleapis.com/envoy.admin.v3.ListenersConfigDump',
        static_listeners: list(resources['listeners']).map((listener) => ({ listener })),
      },
      {
        '@type': 'type.googleapis.com/envoy.admin.v3.ClustersConfigDump',
        static_clusters: list(resources['clusters']).map((cluster) => ({ cluster })),
      },
      {
        '@type': 'type.googleapis.com/envoy.admin.v3.RoutesConfigDump',
        static_route_configs: dumpListeners({
          configs: [
            {
              '@type': 'type.googleapis.com/envoy.admin.v3.ListenersConfigDump',
              static_listeners: list(resources['listeners']).map((listener) => ({ listener })),
            },
          ],
        }).map((l) => ({ route_config: connectionManager(l)['route_config'] })),
      },
    ],
  };
}
