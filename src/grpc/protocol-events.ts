// What a stranger or a fuzzer on the port produces by the thousand (protocol errors, refused
// connections, rapid resets), told the same way on every transport: counted one by one (the
// metric, through `onProtocolEvent`), logged at most once per kind per interval (the rest at debug,
// with the number suppressed on the next line that is written).
import { performance } from 'node:perf_hooks';
import type { Logger } from 'pino';
import { LogThrottle } from '../util/log-throttle.js';
import type { GrpcServerOptions } from './server-options.js';

export type ProtocolEventReport<K extends string> = (kind: K, details: Record<string, unknown>) => void;

export function protocolEventReporter<K extends string>(
  opts: Pick<GrpcServerOptions, 'onProtocolEvent'>,
  logger: Logger,
): ProtocolEventReport<K> {
  const log = new LogThrottle<K>();
  return (kind, details) => {
    opts.onProtocolEvent?.(kind);
    const suppressed = log.admit(kind, performance.now());
    if (suppressed === undefined) logger.debug(details, `HTTP/2 ${kind}`);
    else logger.info(suppressed === 0 ? { ...details, kind } : { ...details, kind, suppressed }, `HTTP/2 ${kind}`);
  };
}
