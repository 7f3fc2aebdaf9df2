// The gRPC listener's TLS identity (certificate chain + private key): read from files that may be
// replaced while we run (a mounted Kubernetes Secret), or made once at start (self-signed).
// Knows nothing about gRPC: the edge subscribes and hands each new pair to its server.

import { watch, type FSWatcher } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { hostname } from 'node:os';
import { dirname } from 'node:path';
import { createSecureContext } from 'node:tls';
import type { Logger } from 'pino';
import { generate as generateSelfSigned } from 'selfsigned';

export interface TlsIdentity {
  /** PEM certificate chain, leaf first. */
  readonly cert: Buffer;
  /** PEM private key of the leaf. */
  readonly key: Buffer;
}

/** The pair as TLS context options (a fresh object: TLS servers keep what they are given). */
export function secureContextOptions(identity: TlsIdentity): { cert: Buffer; key: Buffer } {
  return { cert: identity.cert, key: identity.key };
}

export interface TlsIdentitySource {
  /** The pair to serve now (always a valid one: a bad replacement is refused and logged). */
  current(): TlsIdentity;
  /** Calls `listener` after each accepted replacement; returns the unsubscribe function. */
  onChange(listener: (identity: TlsIdentity) => void): () => void;
  /** Stops watching files. */
  close(): void;
}

/** Throws unless `cert` and `key` are PEM and belong together (what Node's TLS would refuse later). */
function checkIdentity(identity: TlsIdentity): void {
  createSecureContext({ cert: identity.cert, key: identity.key });
}

/** Where the identity comes from (config `listen.tls`, as config.ts builds it). */
export type TlsIdentitySettings =
  { readonly mode: 'files'; readonly certFile: string; readonly keyFile: string } | { readonly mode: 'self-signed' };

export async function openTlsIdentity(
  config: TlsIdentitySettings,
  logger: Logger,
  options: { pollIntervalMs?: number } = {},
): Promise<TlsIdentitySource> {
  if (config.mode === 'self-signed') {
    const identity = await makeSelfSignedIdentity();
    logger.warn('gRPC TLS: no certificate configured; serving a self-signed one made at start (Envoy must not verify it)');
    return { current: () => identity, onChange: () => () => {}, close: () => {} };
  }
  return FileTlsIdentity.open(config.certFile, config.keyFile, logger, options.pollIntervalMs ?? DEFAULT_POLL_MS);
}

/** The names a client inside the pod or the cluster may dial; Envoy in our profiles does not verify it. */
export async function makeSelfSignedIdentity(names: readonly string[] = ['localhost', hostname()]): Promise<TlsIdentity> {
  const now = new Date();
  const pems = await generateSelfSigned([{ name: 'commonName', value: 'llm-extproc' }], {
    keyType: 'ec',
    curve: 'P-256',
    algorithm: 'sha256',
    notBeforeDate: new Date(now.getTime() - 60_000),
    notAfterDate: new Date(now.getTime() + 365 * 24 * 3600_000),
    extensions: [
      { name: 'basicConstraints', cA: false },
      { name: 'keyUsage', digitalSignature: true, keyEncipherment: true, critical: true },
      { name: 'extKeyUsage', serverAuth: true },
      {
        name: 'subjectAltName',
        altNames: [
          ...[...new Set(names)].map((value) => ({ type: 2 as const, value })),
          { type: 7 as const, ip: '127.0.0.1' },
          { type: 7 as const, ip: '::1' },
        ],
      },
    ],
  });
  return { cert: Buffer.from(pems.cert), key: Buffer.from(pems.private) };
}

/**
 * Kubernetes updates a mounted Secret by writing a new timestamped directory and swapping the
 * `..data` symlink, so the files we were given never change in place: watching the directory sees
 * the swap; a slow poll covers file systems where inotify says nothing (and missed events).
 */
const DEFAULT_POLL_MS = 30_000;

class FileTlsIdentity implements TlsIdentitySource {
  private readonly listeners = new Set<(identity: TlsIdentity) => void>();
  private readonly watchers: FSWatcher[] = [];
  private readonly poll: NodeJS.Timeout;
  private reloading: Promise<void> | undefined;
  private again = false;
  private closed = false;

  private constructor(
    private readonly certFile: string,
    private readonly keyFile: string,
    private identity: TlsIdentity,
    private readonly logger: Logger,
    pollIntervalMs: number,
  ) {
    for (const dir of new Set([dirname(certFile), dirname(keyFile)])) {
      try {
        const watcher = watch(dir, { persistent: false }, () => this.reload());
        watcher.on('error', (err) => logger.warn({ err, dir }, 'gRPC TLS: watching the certificate directory failed; relying on polling'));
        this.watchers.push(watcher);
      } catch (err) {
        logger.warn({ err, dir }, 'gRPC TLS: cannot watch the certificate directory; relying on polling');
      }
    }
    this.poll = setInterval(() => this.reload(), pollIntervalMs);
    this.poll.unref();
  }

  static async open(certFile: string, keyFile: string, logger: Logger, pollIntervalMs: number): Promise<FileTlsIdentity> {
    const identity = await readIdentity(certFile, keyFile);
    try {
      checkIdentity(identity);
    } catch (err) {
      throw new Error(`gRPC TLS: ${certFile} and ${keyFile} are not a usable certificate and key: ${(err as Error).message}`, {
        cause: err,
      });
    }
    logger.info({ certFile, keyFile }, 'gRPC TLS: serving the configured certificate; reloading it when the files change');
    return new FileTlsIdentity(certFile, keyFile, identity, logger, pollIntervalMs);
  }

  current(): TlsIdentity {
    return this.identity;
  }

  onChange(listener: (identity: TlsIdentity) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  close(): void {
    this.closed = true;
    clearInterval(this.poll);
    for (const watcher of this.watchers) watcher.close();
    this.listeners.clear();
  }

  /** One reload at a time; events during a reload cause one more pass so the last state wins. */
  private reload(): void {
    if (this.closed) return;
    if (this.reloading !== undefined) {
      this.again = true;
      return;
    }
    this.reloading = this.reloadOnce().finally(() => {
      this.reloading = undefined;
      if (this.again) {
        this.again = false;
        this.reload();
      }
    });
  }

  private async reloadOnce(): Promise<void> {
    let next: TlsIdentity;
    try {
      next = await readIdentity(this.certFile, this.keyFile);
    } catch (err) {
      // Mid-swap or removed: keep serving the last good pair; the next event or poll retries.
      this.logger.debug({ err }, 'gRPC TLS: certificate files not readable right now; keeping the current pair');
      return;
    }
    if (this.closed || (next.cert.equals(this.identity.cert) && next.key.equals(this.identity.key))) return;
    try {
      checkIdentity(next);
    } catch (err) {
      // A half-written pair (certificate of the new, key of the old) lands here until both are new.
      this.logger.warn(
        { err, certFile: this.certFile, keyFile: this.keyFile },
        'gRPC TLS: new certificate files are not a usable pair; keeping the current one',
      );
      return;
    }
    this.identity = next;
    this.logger.info({ certFile: this.certFile }, 'gRPC TLS: certificate reloaded; new connections use it, open streams continue');
    for (const listener of [...this.listeners]) listener(next);
  }
}

async function readIdentity(certFile: string, keyFile: string): Promise<TlsIdentity> {
  const [cert, key] = await Promise.all([readFile(certFile), readFile(keyFile)]);
  return { cert, key };
}
