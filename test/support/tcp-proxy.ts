// A TCP proxy we control between a client and a server, to cut the path between them on command
// (a publisher gone for the subscriber while the server itself lives on) and to restore it. While
// cut it resets every connection it carries and refuses new ones, as a dead peer's host would.

import { createServer, connect, type Server, type Socket } from 'node:net';

export interface TcpProxy {
  /** Where clients connect (127.0.0.1). */
  readonly port: number;
  /** Resets every open connection and refuses new ones until `restore`. */
  cut(): void;
  restore(): void;
  /** Connections carried so far. */
  readonly accepted: number;
  close(): Promise<void>;
}

export async function startTcpProxy(target: { host: string; port: number }): Promise<TcpProxy> {
  const open = new Set<Socket>();
  let cut = false;
  let accepted = 0;
  const server: Server = createServer((client) => {
    if (cut) {
      client.resetAndDestroy();
      return;
    }
    accepted++;
    const upstream = connect(target.port, target.host);
    open.add(client);
    open.add(upstream);
    const end = (): void => {
      open.delete(client);
      open.delete(upstream);
      if (!client.destroyed) client.resetAndDestroy();
      if (!upstream.destroyed) upstream.resetAndDestroy();
    };
    client.on('error', end).on('close', end);
    upstream.on('error', end).on('close', end);
    client.pipe(upstream);
    upstream.pipe(client);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('proxy has no TCP address');
  return {
    port: address.port,
    cut: () => {
      cut = true;
      for (const socket of open) socket.resetAndDestroy();
      open.clear();
    },
    restore: () => {
      cut = false;
    },
    get accepted() {
      return accepted;
    },
    close: async () => {
      cut = true;
      for (const socket of open) socket.resetAndDestroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
