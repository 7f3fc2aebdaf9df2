// The bench's own writes to the API server (pod creation and kubelet-style status patches), over
// one pool of keep-alive TLS connections. client-node builds a new https.Agent, so a new TLS
// handshake, for every call: creating 5,000 pods through it took 67 s of the bench's CPU next to
// the API server's 78 s, and every measured status write paid a handshake a kubelet does not.
// What llm-extproc reads still goes through client-node; this is only the load generator.

import { Agent, request } from 'node:https';

export interface ApiWriterOptions {
  /** `https://host:port` */
  readonly server: string;
  /** CA bundle (PEM) of the serving certificate. */
  readonly ca: string;
  readonly token: string;
  /** Connections kept open (and requests in flight) at most. */
  readonly connections: number;
}

/** An API error as the bench's retry logic reads it: `code` is the HTTP status or a socket error code. */
class ApiWriteError extends Error {
  constructor(
    readonly code: number | string,
    message: string,
  ) {
    super(message);
  }
}

export class ApiWriter {
  private readonly agent: Agent;

  constructor(private readonly options: ApiWriterOptions) {
    this.agent = new Agent({ keepAlive: true, maxSockets: options.connections, ca: options.ca });
  }

  createPod(namespace: string, pod: object): Promise<void> {
    return this.send('POST', `/api/v1/namespaces/${namespace}/pods`, 'application/json', pod);
  }

  /** The kubelet's status write: a strategic merge patch of the status subresource. */
  patchPodStatus(namespace: string, name: string, status: object): Promise<void> {
    return this.send('PATCH', `/api/v1/namespaces/${namespace}/pods/${name}/status`, 'application/strategic-merge-patch+json', {
      status,
    });
  }

  close(): void {
    this.agent.destroy();
  }

  private send(method: string, path: string, contentType: string, body: object): Promise<void> {
    const payload = JSON.stringify(body);
    return new Promise((resolve, reject) => {
      const req = request(
        `${this.options.server}${path}`,
        {
          method,
          agent: this.agent,
          headers: {
            authorization: `Bearer ${this.options.token}`,
            'content-type': contentType,
            'content-length': Buffer.byteLength(payload),
            accept: 'application/json',
          },
        },
        (res) => {
          const status = res.statusCode ?? 0;
          const chunks: Buffer[] = [];
          // Success bodies echo the whole pod; read them only to free the connection.
          res.on('data', (chunk: Buffer) => {
            if (status >= 300) chunks.push(chunk);
          });
          res.on('end', () => {
            if (status >= 200 && status < 300) resolve();
            else
              reject(
                new ApiWriteError(status, `${method} ${path}: HTTP ${status} ${Buffer.concat(chunks).toString('utf8').slice(0, 300)}`),
              );
          });
          res.on('error', (err: NodeJS.ErrnoException) => reject(new ApiWriteError(err.code ?? 'ERESPONSE', err.message)));
        },
      );
      req.setTimeout(60_000, () => req.destroy(Object.assign(new Error(`${method} ${path} timed out`), { code: 'ETIMEDOUT' })));
      req.on('error', (err: NodeJS.ErrnoException) => reject(new ApiWriteError(err.code ?? 'EREQUEST', err.message)));
      req.end(payload);
    });
  }
}
