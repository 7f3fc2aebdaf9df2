// The gRPC listener's TLS identity (certificate chain + private key, and optionally the CA that
// client certificates must chain to): read from files that may be replaced while we run (mounted
// Kubernetes Secrets), or made once at start (self-signed).
// Knows nothing about gRPC: the edge subscribes and hands each new identity to its server.

import { watch, type FSWatcher } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { hostname } from 'node:os';
import { dirname } from 'node:path';
import type { Logger } from 'pino';

export interface TlsIdentity {
  /** PEM certificate chain, leaf first. */
  readonly cert: Buffer;
  /** PEM private key of the leaf. */
  readonly key: Buffer;
  /** PEM CA certificate(s) a client's certificate must chain to (mutual TLS); absent = any client. */
  readonly clientCa?: Buffer;
}

/** The identity as TLS context options (a fresh object: TLS servers keep what they are given). */
export function secureContextOptions(identity: TlsIdentity): { cert: Buffer; key: Buffer; ca?: Buffer } {
  return { cert: identity.cert, key: identity.key, ...(identity.clientCa === undefined ? {} : { ca: identity.clientCa }) };
}

/**
 * Server options (fixed for the listener's life) for client certificates: with a client CA, a
 * client must present a certificate that chains to it, or the handshake fails; without, none is
 * asked for. The CA itself is part of the secure context, so a reload replaces it.
 */
export function clientVerificationOptions(identity: TlsIdentity): { requestCert: boolean; rejectUnauthorized: boolean } {
  const mutual = identity.clientCa !== undefined;
  return { requestCert: mutual, rejectUnauthorized: mutual };
}

export interface TlsIdentitySource {
  /** The pair to serve now (always a valid one: a bad replacement is refused and logged). */
  current(): TlsIdentity;
  /** Calls `listener` after each accepted replacement; returns the unsubscribe function. */
  onChange(listener: (identity: TlsIdentity) => void): () => void;
  /** Stops watching files. */
  close(): void;
}

/**
 * Throws unless `cert` and `key` are PEM and belong together (what Node's TLS would refuse later),
 * and a client CA holds at least one certificate (Node would silently trust nothing otherwise).
 */
async function checkIdentity(identity: TlsIdentity): Promise<void> {
  // Loaded here, not at start: a server without TLS never initialises Node's TLS (some MiB of memory).
  const [{ createSecureContext }, { X509Certificate }] = await Promise.all([import('node:tls'), import('node:crypto')]);
  createSecureContext(secureContextOptions(identity));
  if (identity.clientCa !== undefined) {
    try {
      new X509Certificate(identity.clientCa);
    } catch (err) {
      throw new Error(`the client CA is not a PEM certificate: ${(err as Error).message}`, { cause: err });
    }
  }
}

/** Where the identity comes from (config `listen.tls`, as config.ts builds it). */
export type TlsIdentitySettings =
  | { readonly mode: 'files'; readonly certFile: string; readonly keyFile: string; readonly clientCaFile?: string }
  | { readonly mode: 'self-signed' };

/** The files of a `files` identity. */
interface IdentityFiles {
  readonly certFile: string;
  readonly keyFile: string;
  readonly clientCaFile?: string;
}

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
  return FileTlsIdentity.open(config, logger, options.pollIntervalMs ?? DEFAULT_POLL_MS);
}

/** The names a client inside the pod or the cluster may dial; Envoy in our profiles does not verify it. */
export async function makeSelfSignedIdentity(names: readonly string[] = ['localhost', hostname()]): Promise<TlsIdentity> {
  // Loaded only here: selfsigned brings a whole X.509 stack that a server with its own certificate never runs.
  const { generate: generateSelfSigned } = await import('selfsigned');
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
    private readonly files: IdentityFiles,
    private identity: TlsIdentity,
    private readonly logger: Logger,
    pollIntervalMs: number,
  ) {
    const paths = [files.certFile, files.keyFile, ...(files.clientCaFile === undefined ? [] : [files.clientCaFile])];
    for (const dir of new Set(paths.map((path) => dirname(path)))) {
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

  static async open(files: IdentityFiles, logger: Logger, pollIntervalMs: number): Promise<FileTlsIdentity> {
    const identity = await readUsableIdentity(files);
    logger.info(
      { certFile: files.certFile, keyFile: files.keyFile, clientCaFile: files.clientCaFile },
      files.clientCaFile === undefined
        ? 'gRPC TLS: serving the configured certificate; reloading it when the files change'
        : 'gRPC TLS: serving the configured certificate to clients with a certificate from the client CA (mutual TLS); reloading both when the files change',
    );
    return new FileTlsIdentity(files, identity, logger, pollIntervalMs);
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
      next = await readIdentity(this.files);
    } catch (err) {
      // Mid-swap or removed: keep serving the last good pair; the next event or poll retries.
      this.logger.debug({ err }, 'gRPC TLS: certificate files not readable right now; keeping the current pair');
      return;
    }
    if (this.closed || sameIdentity(next, this.identity)) return;
    try {
      await checkIdentity(next);
    } catch (err) {
      // A half-written pair (certificate of the new, key of the old) lands here until both are new.
      this.logger.warn(
        { err, ...this.files },
        'gRPC TLS: new certificate files are not a usable pair (or client CA); keeping the current one',
      );
      return;
    }
    if (this.closed) return;
    this.identity = next;
    this.logger.info({ ...this.files }, 'gRPC TLS: certificate reloaded; new connections use it, open streams continue');
    for (const listener of [...this.listeners]) listener(next);
  }
}

function sameIdentity(a: TlsIdentity, b: TlsIdentity): boolean {
  const sameCa = a.clientCa === undefined ? b.clientCa === undefined : b.clientCa !== undefined && a.clientCa.equals(b.clientCa);
  return a.cert.equals(b.cert) && a.key.equals(b.key) && sameCa;
}

/** Reads the files and checks them as TLS would at start (also `--check-config`'s check); the error names the files. */
export async function readUsableIdentity(files: IdentityFiles): Promise<TlsIdentity> {
  const identity = await readIdentity(files);
  try {
    await checkIdentity(identity);
  } catch (err) {
    const ca = files.clientCaFile === undefined ? '' : ` (client CA ${files.clientCaFile})`;
    throw new Error(
      `gRPC TLS: ${files.certFile} and ${files.keyFile}${ca} are not a usable certificate and key: ${(err as Error).message}`,
      { cause: err },
    );
  }
  return identity;
}

async function readIdentity(files: IdentityFiles): Promise<TlsIdentity> {
  const [cert, key, clientCa] = await Promise.all([
    readFile(files.certFile),
    readFile(files.keyFile),
    files.clientCaFile === undefined ? undefined : readFile(files.clientCaFile),
  ]);
  return { cert, key, ...(clientCa === undefined ? {} : { clientCa }) };
}
