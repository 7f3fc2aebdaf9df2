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

/** `dir/tls.crt -> ..data/tls.crt`, `dir/..data -> ..<version>`: the files themselves never change. */
export async function secretVolume(dir: string, identity: TlsIdentity): Promise<SecretVolume> {
  await mkdir(dir, { recursive: true });
  let version = 0;
  const write = async (next: TlsIdentity): Promise<void> => {
    version += 1;
    const versionDir = `..v${version}`;
    await mkdir(join(dir, versionDir));
    await writeFile(join(dir, versionDir, CERT_NAME), next.cert);
    await writeFile(join(dir, versionDir, KEY_NAME), next.key);
    await symlink(versionDir, join(dir, '..data_tmp'));
    await rename(join(dir, '..data_tmp'), join(dir, '..data'));
    if (version > 1) await rm(join(dir, `..v${version - 1}`), { recursive: true, force: true });
  };
  await write(identity);
  await symlink(join('..data', CERT_NAME), join(dir, CERT_NAME));
  await symlink(join('..data', KEY_NAME), join(dir, KEY_NAME));
  return { dir, certFile: join(dir, CERT_NAME), keyFile: join(dir, KEY_NAME), write };
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

export interface TestCa {
  readonly caPem: string;
  /** A server certificate for `localhost` / 127.0.0.1 (and `dnsNames`) signed by this CA (a fresh key each call). */
  issue(dnsNames?: readonly string[]): Promise<TlsIdentity>;
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
  };
}
