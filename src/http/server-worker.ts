/**
 * The server's own thread (see server-thread.ts): starts the server with the options it was given,
 * reports how it went, and closes it when asked.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { startServer, type ServeOptions } from './server.js';
import type { FromServerThread, ToServerThread } from './server-thread.js';

const port = parentPort!;
const send = (message: FromServerThread): void => port.postMessage(message);

try {
  const server = await startServer(workerData as ServeOptions);
  port.on('message', (message: ToServerThread) => {
    if (message.type !== 'close') return;
    server.close().then(
      () => {
        send({ type: 'closed' });
        port.close();
      },
      (err: Error) => send({ type: 'failed', message: err.message }),
    );
  });
  send({ type: 'listening', url: server.url, port: server.port, masterToken: server.masterToken, masterTokenFile: server.masterTokenFile, masterTokenCreated: server.masterTokenCreated });
} catch (err) {
  const e = err as NodeJS.ErrnoException;
  send({ type: 'failed', message: e.message, code: e.code });
  port.close();
}
