// Which models this replica serves, as the endpoint view says now: what GET /v1/models lists, and
// what may label a metric series (a client must not mint series by naming models at will).

import type { EndpointStore } from '../endpoints/store.js';
import { GatewayError } from '../errors/gateway-error.js';

export const NOT_SYNCED_RETRY_AFTER_SECONDS = 5;

export class ServedModels {
  constructor(
    private readonly store: EndpointStore,
    /** Serve exactly this pool (routing.pool); absent = every pool of the view. */
    private readonly scope: string | undefined,
  ) {}

  /** Whether some pool serves this model. */
  serves(model: string): boolean {
    if (this.scope === undefined) return this.store.view().poolsByModel.has(model);
    return this.store.view().pools.get(this.scope)?.models.includes(model) ?? false;
  }

  /** The models served now, as the view says (before the first sync: those of the pools seen so far). */
  names(): string[] {
    const view = this.store.view();
    return this.scope === undefined ? [...view.poolsByModel.keys()] : [...(view.pools.get(this.scope)?.models ?? [])];
  }

  /** OpenAI `GET /v1/models` answer; throws `no_ready_replica` before the first sync. */
  list(): unknown {
    requireSynced(this.store, 'the served models cannot be listed yet', {});
    const data = this.names()
      .sort()
      .map((id) => ({ id, object: 'model', created: 0, owned_by: 'llm-extproc' }));
    return { object: 'list', data };
  }
}

/** Until the source's first complete view we know neither the models nor their pods. */
export function requireSynced(store: EndpointStore, what: string, details: Record<string, unknown>): void {
  if (store.isSynced()) return;
  throw new GatewayError(
    'no_ready_replica',
    `${what}: the endpoint list has not been loaded (waiting for the first sync with the endpoint source). Retry in about ${NOT_SYNCED_RETRY_AFTER_SECONDS} s.`,
    { details: { ...details, endpoints_synced: false }, retryAfterSeconds: NOT_SYNCED_RETRY_AFTER_SECONDS },
  );
}
