// TLS on the gRPC listener: a self-signed identity made at start, and certificate files replaced
// the way Kubernetes replaces a mounted Secret, picked up without a restart and without touching
// streams that are already open.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client, credentials } from '@grpc/grpc-js';
import type { ClientDuplexStream, ServiceError } from '@grpc/grpc-js';
import { pino } from 'pino';
import { GRPC_TRANSPORTS } from '../../../src/config/schema.js';
import { startExtProcServer } from '../../../src/extproc/server.js';
import type { RunningGrpcServer } from '../../../src/grpc/server.js';
import type { GrpcTransport } from '../../../src/config/config.js';
import type { ProcessingRequest, ProcessingResponse } from '../../../src/extproc/messages.js';
import type { ProcessorFactory } from '../../../src/extproc/stream-processor.js';
import { makeSelfSignedIdentity, openTlsIdentity, type TlsIdentity, type TlsIdentitySource } from '../../../src/grpc/tls-identity.js';
import { loadWireDefinitions } from '../../support/proto-definitions.js';
import type { HealthCheckResponse } from '../../support/proto-definitions.js';
import { fingerprint, secretVolume, servedFingerprint } from '../../support/tls-files.js';
import { waitUntil } from '../../support/wait-until.js';

const wire = loadWireDefinitions();
const silent = pino({ level: 'silent' });
const alwaysServing = { isServing: () => true, onChange: () => () => {} };

/** Answers every request_headers message with an empty CONTINUE: enough to see a stream is alive. */
const continueFactory: ProcessorFactory = () => ({
  process: (request: ProcessingRequest): ProcessingResponse[] =>
    request.request_headers !== undefined ? [{ request_headers: { response: {} } }] : [],
  finish: () => {},
});

function trusting(identity: TlsIdentity, address: string): Client {
  // The self-signed certificates name localhost; the server is dialled by IP.
  return new Client(address, credentials.createSsl(identity.cert), {
    'grpc.ssl_target_name_override': 'localhost',
    'grpc.default_authority': 'localhost',
  });
}

function check(client: Client): Promise<HealthCheckResponse> {
  const { Check } = wire.health;
  return new Promise((resolve, reject) => {
    client.makeUnaryRequest(
      Check.path,
      Check.requestSerialize,
      Check.responseDeserialize,
      { service: '' },
      (err: ServiceError | null, value?: HealthCheckResponse) => {
        if (err) reject(err);
        else resolve(value ?? {});
      },
    );
  });
}

function openStream(client: Client): {
  call: ClientDuplexStream<ProcessingRequest, ProcessingResponse>;
  nextReply(): Promise<ProcessingResponse>;
} {
  const { Process } = wire.externalProcessor;
  const call = client.makeBidiStreamRequest(Process.path, Process.requestSerialize, Process.responseDeserialize);
  const queue: ProcessingResponse[] = [];
  const waiting: Array<(reply: ProcessingResponse) => void> = [];
  call.on('data', (reply: ProcessingResponse) => {
    const waiter = waiting.shift();
    if (waiter) waiter(reply);
    else queue.push(reply);
  });
  call.on('error', () => {});
  return {
    call,
    nextReply: () => {
      const queued = queue.shift();
      return queued !== undefined ? Promise.resolve(queued) : new Promise((resolve) => waiting.push(resolve));
    },
  };
}

const headers: ProcessingRequest = {
  request_headers: { headers: { headers: [{ key: ':path', raw_value: Buffer.from('/v1/chat/completions') }] } },
};

function startTlsServer(transport: GrpcTransport, tls: TlsIdentitySource): Promise<RunningGrpcServer> {
  return startExtProcServer({
    transport,
    address: '127.0.0.1:0',
    processorFactory: continueFactory,
    health: alwaysServing,
    logger: silent,
    tls,
  });
}

for (const impl of GRPC_TRANSPORTS) {
  void describe(`${impl}: gRPC listener TLS`, () => {
    void it('serves a self-signed certificate made at start; plaintext clients are refused', async () => {
      const identity = await openTlsIdentity({ mode: 'self-signed' }, silent);
      const server = await startTlsServer(impl, identity);
      const secure = trusting(identity.current(), server.address);
      const plain = new Client(server.address, credentials.createInsecure());
      try {
        assert.equal(await servedFingerprint('127.0.0.1', server.port ?? 0), fingerprint(identity.current()));
        assert.deepEqual(await check(secure), { status: 'SERVING' });
        await assert.rejects(check(plain));
      } finally {
        secure.close();
        plain.close();
        await server.shutdown(1_000);
      }
    });

    void it('picks up replaced Secret files without a restart; open streams carry on; a mismatched pair is refused', async () => {
      const dir = await mkdtemp(join(tmpdir(), 'llm-extproc-tls-'));
      const [first, second, third] = await Promise.all([makeSelfSignedIdentity(), makeSelfSignedIdentity(), makeSelfSignedIdentity()]);
      const volume = await secretVolume(join(dir, 'secret'), first);
      // Polling is slowed to a crawl so the test proves the directory watch reacts to the swap.
      const logs: string[] = [];
      const logger = pino({ level: 'info' }, { write: (line: string) => void logs.push(line) });
      const identity = await openTlsIdentity({ mode: 'files', certFile: volume.certFile, keyFile: volume.keyFile }, logger, {
        pollIntervalMs: 3_600_000,
      });
      const server = await startTlsServer(impl, identity);
      const port = server.port ?? 0;
      const oldClient = trusting(first, server.address);
      const clients = [oldClient];
      try {
        const stream = openStream(oldClient);
        stream.call.write(headers);
        assert.ok((await stream.nextReply()).request_headers !== undefined);

        await volume.write(second);
        await waitUntil(async () => ((await servedFingerprint('127.0.0.1', port)) === fingerprint(second) ? true : undefined), {
          description: 'the new certificate being served',
        });
        const newClient = trusting(second, server.address);
        clients.push(newClient);
        assert.deepEqual(await check(newClient), { status: 'SERVING' });
        // The stream opened under the first certificate is still answered on its old connection.
        stream.call.write(headers);
        assert.ok((await stream.nextReply()).request_headers !== undefined);
        stream.call.end();

        // A certificate without its key (the third's certificate, the second's key) never replaces a good pair.
        await volume.write({ cert: third.cert, key: second.key });
        await waitUntil(() => (logs.some((line) => line.includes('not a usable pair')) ? true : undefined), {
          description: 'the mismatched pair being refused',
        });
        assert.equal(await servedFingerprint('127.0.0.1', port), fingerprint(second));
        await volume.write(third);
        await waitUntil(async () => ((await servedFingerprint('127.0.0.1', port)) === fingerprint(third) ? true : undefined), {
          description: 'the third certificate being served',
        });
      } finally {
        for (const client of clients) client.close();
        await server.shutdown(1_000);
        await rm(dir, { recursive: true, force: true });
      }
    });
  });
}
