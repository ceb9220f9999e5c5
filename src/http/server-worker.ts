/**
 * The server's own thread (see server-thread.ts): starts the server with the options it is sent,
 * reports how it went, and closes it when asked.
 */
import { parentPort } from 'node:worker_threads';
import { startServer } from './server.js';
import type { FromServerThread, ToServerThread } from './server-thread.js';

const port = parentPort!;
const send = (message: FromServerThread): void => port.postMessage(message);

// The options come in a message, not as workerData: the thread may have been started before they
// were known, to load these modules meanwhile (prestartServerThread in server-thread.ts).
port.once('message', async (message: ToServerThread) => {
  if (message.type !== 'start') return port.close();
  try {
    const server = await startServer(message.options);
    port.on('message', (next: ToServerThread) => {
      if (next.type !== 'close') return;
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
});
