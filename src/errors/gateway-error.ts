// The one error type that crosses module boundaries. It carries a catalog kind (which decides
// status, type and code), a client-safe message, optional structured details for the body, and a
// `cause` that is for logs only: the renderer never reads it.

import { catalogEntry } from './catalog.js';
import type { CatalogEntry, ErrorKind } from './catalog.js';

export interface GatewayErrorOptions {
  /** The underlying failure, for logs. Never rendered to a client. */
  cause?: unknown;
  /** Client-safe structured facts merged under `error` in the body (e.g. `model`, `replicas`). */
  details?: Record<string, unknown>;
  /** Per-error Retry-After, overriding the catalog default (e.g. by replica state). */
  retryAfterSeconds?: number;
}

/** Message used when an unknown failure is turned into `internal_error`: the original text may leak internals. */
export const INTERNAL_ERROR_MESSAGE = 'The gateway failed unexpectedly while handling the request.';

export class GatewayError extends Error {
  readonly kind: ErrorKind;
  readonly details?: Record<string, unknown>;
  readonly retryAfterSeconds?: number;

  /** @param message client-facing text: say what happened and what to do, no internals. */
  constructor(kind: ErrorKind, message: string, options?: GatewayErrorOptions) {
    // Only pass `cause` when given, so `'cause' in err` stays meaningful for loggers.
    super(message, options !== undefined && 'cause' in options ? { cause: options.cause } : undefined);
    this.name = 'GatewayError';
    this.kind = kind;
    if (options?.details !== undefined) this.details = options.details;
    if (options?.retryAfterSeconds !== undefined) this.retryAfterSeconds = options.retryAfterSeconds;
  }

  get entry(): CatalogEntry {
    return catalogEntry(this.kind);
  }

  /** A GatewayError as is; anything else becomes `internal_error`, keeping the original as `cause`. */
  static from(err: unknown): GatewayError {
    if (err instanceof GatewayError) return err;
    return new GatewayError('internal_error', INTERNAL_ERROR_MESSAGE, { cause: err });
  }
}
