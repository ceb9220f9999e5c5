import net from 'node:net';
import { listenInPlaceOf } from './proxy-address.js';

/**
 * A TCP proxy to a database that can go silent: while `silent` is on it stops passing bytes either
 * way and closes nothing, as a network that drops packets does. `url` is the database's URL with
 * the proxy's address in it.
 */
export async function silentProxy(databaseUrl: string): Promise<{ url: string; silent: { on: boolean }; close: () => void }> {
  const target = new URL(databaseUrl);
  const silent = { on: false };
  const sockets = new Set<net.Socket>();
  const proxy = net.createServer((inbound) => {
    const outbound = net.connect(Number(target.port || 5432), target.hostname);
    const pass = (from: net.Socket, to: net.Socket) =>
      from.on('data', (chunk: Buffer) => {
        if (!silent.on) to.write(chunk);
      });
    pass(inbound, outbound);
    pass(outbound, inbound);
    for (const s of [inbound, outbound]) {
      sockets.add(s);
      s.on('error', () => undefined).on('close', () => (sockets.delete(s), inbound.destroy(), outbound.destroy()));
    }
  });
  return { ...(await listenInPlaceOf(proxy, sockets, databaseUrl)), silent };
}
