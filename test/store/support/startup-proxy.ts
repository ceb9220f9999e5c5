import net from 'node:net';
import { listenInPlaceOf } from './proxy-address.js';

/**
 * A TCP proxy to a database that can hand a new connection its ready answer and its end in one
 * read: once `armNext` is called, the server's answers to the next connection's startup are held
 * from its ReadyForQuery on; `onReady(pid)` is told the backend's process id (to terminate it),
 * and what the server sends then (its FATAL error, as `pg_terminate_backend` makes it) is passed on
 * together with the held bytes, in one write. A client busy when its connection opens reads both
 * in one chunk that way too.
 */
export async function startupProxy(databaseUrl: string): Promise<{ url: string; armNext: (onReady: (pid: number) => void) => void; close: () => void }> {
  const target = new URL(databaseUrl);
  const sockets = new Set<net.Socket>();
  let armed: ((pid: number) => void) | undefined;
  const proxy = net.createServer((inbound) => {
    const outbound = net.connect(Number(target.port || 5432), target.hostname);
    inbound.on('data', (chunk: Buffer) => outbound.write(chunk));
    const onReady = armed;
    armed = undefined;
    if (!onReady) {
      outbound.on('data', (chunk: Buffer) => inbound.write(chunk));
    } else {
      let held = Buffer.alloc(0);
      let pid = 0;
      let ready = false;
      outbound.on('data', (chunk: Buffer) => {
        held = Buffer.concat([held, chunk]);
        if (ready) {
          // What came after the ready answer: passed on with it, in one write.
          inbound.write(held);
          held = Buffer.alloc(0);
          return;
        }
        // Messages: one type byte, then an int32 length that counts itself.
        for (let at = 0; at + 5 <= held.length; ) {
          const type = String.fromCharCode(held[at]!);
          const length = held.readInt32BE(at + 1);
          if (at + 1 + length > held.length) break;
          if (type === 'K') pid = held.readInt32BE(at + 5);
          at += 1 + length;
          if (type === 'Z') {
            ready = true;
            onReady(pid);
            break;
          }
        }
      });
    }
    for (const s of [inbound, outbound]) {
      sockets.add(s);
      s.on('error', () => undefined).on('close', () => (sockets.delete(s), inbound.end(), outbound.destroy()));
    }
  });
  return {
    ...(await listenInPlaceOf(proxy, sockets, databaseUrl)),
    armNext: (onReady) => {
      armed = onReady;
    },
  };
}
