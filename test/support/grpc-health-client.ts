// A grpc.health.v1 client for tests, built from the server's own wire definitions so the test
// speaks exactly the protocol the server implements (Check and the Watch stream).

import { Client, credentials } from '@grpc/grpc-js';
import type { ClientReadableStream, ServiceError } from '@grpc/grpc-js';
import { loadWireDefinitions } from './proto-definitions.js';
import type { HealthCheckRequest, HealthCheckResponse, ServingStatus } from './proto-definitions.js';

export interface HealthWatch {
  /** Every status received so far, in order (`UNKNOWN` for the proto zero value). */
  readonly statuses: readonly ServingStatus[];
  /** Resolves once a status equal to `status` arrives (at once if one already has). */
  until(status: ServingStatus, options?: { timeoutMs?: number }): Promise<void>;
  cancel(): void;
}

export interface HealthClient {
  /** Unary Check; rejects with the gRPC ServiceError (e.g. NOT_FOUND for an unknown service). */
  check(service?: string): Promise<ServingStatus>;
  /** Opens a Watch stream; its statuses accumulate until cancel() or close(). */
  watch(service?: string): HealthWatch;
  /** Cancels open watches and closes the channel. */
  close(): void;
}

const wire = loadWireDefinitions();

/** `address` is what the gRPC server reports: `host:port` or `unix:///path.sock`. */
export function healthClient(address: string): HealthClient {
  const client = new Client(address, credentials.createInsecure());
  const watches = new Set<ClientReadableStream<HealthCheckResponse>>();
  const { Check, Watch } = wire.health;
  return {
    check: (service = '') =>
      new Promise<ServingStatus>((resolve, reject) => {
        const request: HealthCheckRequest = { service };
        client.makeUnaryRequest(
          Check.path,
          Check.requestSerialize,
          Check.responseDeserialize,
          request,
          (err: ServiceError | null, value?: HealthCheckResponse) => {
            if (err !== null) reject(err);
            else resolve(value?.status ?? 'UNKNOWN');
          },
        );
      }),
    watch: (service = '') => {
      const request: HealthCheckRequest = { service };
      const call = client.makeServerStreamRequest(Watch.path, Watch.requestSerialize, Watch.responseDeserialize, request);
      watches.add(call);
      const statuses: ServingStatus[] = [];
      const waiters = new Set<{ status: ServingStatus; done: () => void }>();
      call.on('data', (message: HealthCheckResponse) => {
        const status = message.status ?? 'UNKNOWN';
        statuses.push(status);
        for (const waiter of [...waiters]) if (waiter.status === status) waiter.done();
      });
      // Cancelling our own call ends it with CANCELLED; a server-side end is not an error here.
      call.on('error', () => {});
      call.on('close', () => watches.delete(call));
      return {
        statuses,
        until: (status, options = {}) =>
          new Promise<void>((resolve, reject) => {
            if (statuses.includes(status)) {
              resolve();
              return;
            }
            const timeoutMs = options.timeoutMs ?? 10_000;
            const waiter = {
              status,
              done: () => {
                clearTimeout(timer);
                waiters.delete(waiter);
                resolve();
              },
            };
            const timer = setTimeout(() => {
              waiters.delete(waiter);
              reject(new Error(`health Watch did not report ${status} within ${timeoutMs} ms (saw: ${statuses.join(', ') || 'nothing'})`));
            }, timeoutMs);
            waiters.add(waiter);
          }),
        cancel: () => call.cancel(),
      };
    },
    close: () => {
      for (const call of watches) call.cancel();
      watches.clear();
      client.close();
    },
  };
}
