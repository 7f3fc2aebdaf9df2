// grpc.health.v1 semantics, independent of the transport that carries them: which service names
// we answer, what each one follows, and the Watch call's "current status, then every change".
import type { HealthCheckRequest, HealthCheckResponse, ServingStatus } from './health-messages.js';

export interface HealthSource {
  isServing(): boolean;
  /** Calls `listener` whenever isServing() may have changed; returns the unsubscribe function. */
  onChange(listener: () => void): () => void;
}

/**
 * Health service names. `liveness`: the process answers (SERVING until shutdown starts).
 * `readiness`, "" and the name of each service we serve (for us, the ext_proc service): ready to
 * route (synced and not draining). The inference extension's endpoint-picker protocol asks for
 * `liveness` and `readiness`; Envoy's gRPC health check and most probes ask for "" or the service name.
 */
const LIVENESS_SERVICE = 'liveness';
const READINESS_NAMES = ['', 'readiness'];

function servingStatus(health: HealthSource): ServingStatus {
  return health.isServing() ? 'SERVING' : 'NOT_SERVING';
}

/** What a Check call answers: a status, or NOT_FOUND for a name we do not serve. */
export type CheckAnswer = { found: true; response: HealthCheckResponse } | { found: false; details: string };

/** The health service of one server: readiness from the app, liveness owned here. */
export class HealthService {
  private alive = true;
  private readonly livenessListeners = new Set<() => void>();
  private readonly watches = new Set<HealthWatch>();
  private readonly liveness: HealthSource = {
    isServing: () => this.alive,
    onChange: (listener) => {
      this.livenessListeners.add(listener);
      return () => this.livenessListeners.delete(listener);
    },
  };

  private readonly readinessServices: ReadonlySet<string>;

  /** `services`: the names of the services the server serves, which answer as readiness. */
  constructor(
    private readonly readiness: HealthSource,
    services: Iterable<string>,
  ) {
    this.readinessServices = new Set([...READINESS_NAMES, ...services]);
  }

  healthFor(service: string): HealthSource | undefined {
    if (service === LIVENESS_SERVICE) return this.liveness;
    return this.readinessServices.has(service) ? this.readiness : undefined;
  }

  check(request: HealthCheckRequest): CheckAnswer {
    const service = request.service ?? '';
    const health = this.healthFor(service);
    return health === undefined
      ? { found: false, details: `unknown service "${service}"` }
      : { found: true, response: { status: servingStatus(health) } };
  }

  /** Starts a Watch: `send` gets the current status at once, then every change; `end` closes the call cleanly. */
  watch(request: HealthCheckRequest, send: (response: HealthCheckResponse) => void, end: () => void): HealthWatch {
    const watch = new HealthWatch(this.healthFor(request.service ?? ''), send, end, (w) => this.watches.delete(w));
    this.watches.add(watch);
    return watch;
  }

  /** Shutdown begins: liveness turns NOT_SERVING, and every Watch call is told and ended (they never end on their own). */
  stopServing(): void {
    if (this.alive) {
      this.alive = false;
      for (const listener of [...this.livenessListeners]) listener();
    }
    for (const watch of [...this.watches]) watch.endForShutdown();
  }
}

/** One Watch call: sends the current status, then every change, until the client goes away or shutdown. */
class HealthWatch {
  private last: ServingStatus;
  private readonly unsubscribe: () => void;
  private done = false;

  constructor(
    private readonly health: HealthSource | undefined,
    private readonly send: (response: HealthCheckResponse) => void,
    private readonly end: () => void,
    private readonly onDone: (watch: HealthWatch) => void,
  ) {
    // Per the health protocol an unknown name is not an error for Watch: the call stays open.
    this.last = health === undefined ? 'SERVICE_UNKNOWN' : servingStatus(health);
    this.unsubscribe = health === undefined ? () => {} : health.onChange(() => this.update());
    send({ status: this.last });
  }

  /** The client went away (cancel, error, close): stop following the source. */
  stop(): void {
    if (this.done) return;
    this.done = true;
    this.unsubscribe();
    this.onDone(this);
  }

  /** Server shutdown: tell the watcher we stop serving, then end the call cleanly. */
  endForShutdown(): void {
    if (this.done) return;
    if (this.last === 'SERVING') this.send({ status: 'NOT_SERVING' });
    this.stop();
    this.end();
  }

  private update(): void {
    if (this.done || this.health === undefined) return;
    const now = servingStatus(this.health);
    if (now === this.last) return;
    this.last = now;
    this.send({ status: now });
  }
}
