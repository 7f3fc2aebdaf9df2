// TLS helpers for tests: a certificate directory laid out and updated the way the kubelet updates a
// mounted Secret (timestamped directory + atomic `..data` symlink swap), and a probe that reports
// which certificate a TLS server presents to a new connection.

import { mkdir, rename, rm, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { connect } from 'node:tls';
import { X509Certificate } from 'node:crypto';
import { generate as generateSelfSigned } from 'selfsigned';
import type { TlsIdentity } from '../../src/grpc/tls-identity.js';

export const CERT_NAME = 'tls.crt';
export const KEY_NAME = 'tls.key';

export interface SecretVolume {
  readonly dir: string;
  readonly certFile: string;
  readonly keyFile: string;
  /** Writes a new version and swaps `..data` to it in one rename, as the kubelet does. */
  write(identity: TlsIdentity): Promise<void>;
}

/**
 * `dir/<name> -> ..data/<name>`, `dir/..data -> ..<version>`: the files themselves never change;
 * `write` lays out a new version and swaps `..data` to it in one rename.
 */
async function mountedFiles(dir: string, files: Readonly<Record<string, Buffer | string>>): Promise<(next: typeof files) => Promise<void>> {
  await mkdir(dir, { recursive: true });
  let version = 0;
  const write = async (next: typeof files): Promise<void> => {
    version += 1;
    const versionDir = `..v${version}`;
    await mkdir(join(dir, versionDir));
    for (const [name, content] of Object.entries(next)) await writeFile(join(dir, versionDir, name), content);
    await symlink(versionDir, join(dir, '..data_tmp'));
    await rename(join(dir, '..data_tmp'), join(dir, '..data'));
    if (version > 1) await rm(join(dir, `..v${version - 1}`), { recursive: true, force: true });
  };
  await write(files);
  for (const name of Object.keys(files)) await symlink(join('..data', name), join(dir, name));
  return write;
}

/** A kubernetes.io/tls Secret's mount: tls.crt and tls.key. */
export async function secretVolume(dir: string, identity: TlsIdentity): Promise<SecretVolume> {
  const pair = (i: TlsIdentity) => ({ [CERT_NAME]: i.cert, [KEY_NAME]: i.key });
  const write = await mountedFiles(dir, pair(identity));
  return { dir, certFile: join(dir, CERT_NAME), keyFile: join(dir, KEY_NAME), write: (next) => write(pair(next)) };
}

/** A mounted Secret holding one CA bundle, `ca.crt` (the client CA of mutual TLS). */
export async function caVolume(dir: string, caPem: string): Promise<{ readonly caFile: string; write(caPem: string): Promise<void> }> {
  const write = await mountedFiles(dir, { 'ca.crt': caPem });
  return { caFile: join(dir, 'ca.crt'), write: (next) => write({ 'ca.crt': next }) };
}

export function fingerprint(identity: TlsIdentity): string {
  return new X509Certificate(identity.cert).fingerprint256;
}

/** SHA-256 fingerprint of the certificate a new TLS (ALPN h2) connection to host:port is shown. */
export function servedFingerprint(host: string, port: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host, port, ALPNProtocols: ['h2'], rejectUnauthorized: false, servername: 'localhost' }, () => {
      const cert = socket.getPeerX509Certificate();
      socket.destroy();
      if (cert === undefined) reject(new Error('the server presented no certificate'));
      else resolve(cert.fingerprint256);
    });
    socket.once('error', reject);
  });
}

/**
 * Whether a TLS server serves a new connection presenting `client` (or no certificate): served =
 * the server's HTTP/2 preface arrives after the handshake; refused = the connection fails first (in
 * TLS 1.3 the server's verdict on the client certificate comes after the client's handshake ends).
 */
export function handshakeServed(host: string, port: number, client?: TlsIdentity): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({
      host,
      port,
      ALPNProtocols: ['h2'],
      rejectUnauthorized: false,
      servername: 'localhost',
      ...(client === undefined ? {} : { cert: client.cert, key: client.key }),
    });
    const settle = (served: boolean): void => {
      socket.destroy();
      resolve(served);
    };
    socket.once('data', () => settle(true));
    socket.once('error', () => settle(false));
    socket.once('close', () => settle(false));
  });
}

export interface TestCa {
  readonly caPem: string;
  /** A server certificate for `localhost` / 127.0.0.1 (and `dnsNames`) signed by this CA (a fresh key each call). */
  issue(dnsNames?: readonly string[]): Promise<TlsIdentity>;
  /** A client certificate (extKeyUsage clientAuth) for `commonName`, signed by this CA. */
  issueClient(commonName: string): Promise<TlsIdentity>;
}

/** A throwaway CA, so Envoy can verify llm-extproc's certificate and rotation can keep the same trust. */
export async function makeTestCa(): Promise<TestCa> {
  const ca = await generateSelfSigned([{ name: 'commonName', value: 'llm-extproc test CA' }], {
    keyType: 'ec',
    algorithm: 'sha256',
    extensions: [
      { name: 'basicConstraints', cA: true, critical: true },
      { name: 'keyUsage', keyCertSign: true, cRLSign: true, digitalSignature: true, critical: true },
    ],
  });
  return {
    caPem: ca.cert,
    issue: async (dnsNames: readonly string[] = []) => {
      const leaf = await generateSelfSigned([{ name: 'commonName', value: 'localhost' }], {
        keyType: 'ec',
        algorithm: 'sha256',
        ca: { key: ca.private, cert: ca.cert },
        extensions: [
          { name: 'basicConstraints', cA: false },
          { name: 'keyUsage', digitalSignature: true, keyEncipherment: true },
          { name: 'extKeyUsage', serverAuth: true },
          {
            name: 'subjectAltName',
            altNames: [
              { type: 2, value: 'localhost' },
              ...dnsNames.map((value) => ({ type: 2 as const, value })),
              { type: 7, ip: '127.0.0.1' },
            ],
          },
        ],
      });
      return { cert: Buffer.from(leaf.cert), key: Buffer.from(leaf.private) };
    },
    issueClient: async (commonName: string) => {
      const leaf = await generateSelfSigned([{ name: 'commonName', value: commonName }], {
        keyType: 'ec',
        algorithm: 'sha256',
        ca: { key: ca.private, cert: ca.cert },
        extensions: [
          { name: 'basicConstraints', cA: false },
          { name: 'keyUsage', digitalSignature: true, critical: true },
          { name: 'extKeyUsage', clientAuth: true },
        ],
      });
      return { cert: Buffer.from(leaf.cert), key: Buffer.from(leaf.private) };
    },
  };
}
