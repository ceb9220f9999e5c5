import { Worker } from 'node:worker_threads';
import { threadEntry } from '../thread-entry.js';
import type { RunningServer, ServeOptions } from './server.js';

/**
 * Young-generation size, in MiB, of the thread the server runs on. Every waiting item lives in the
 * old generation, and with a million of them each scavenge pays a fixed cost of several
 * milliseconds however little it collects; V8's default young generation (3 × 16 MiB
 * semi-spaces) scavenges every few dozen milliseconds under load, which took one post in eight
 * at that size. Four times as large makes a quarter as many. V8 reads this only when a heap is
 * created, so it is set on a thread of its own rather than on the process.
 */
export const YOUNG_GENERATION_MB = 192;

export type ToServerThread = { type: 'start'; options: Omit<ServeOptions, 'warn'> } | { type: 'close' };
export type FromServerThread =
  | { type: 'listening'; url: string; port: number; masterToken: string; masterTokenFile?: string; masterTokenCreated: boolean }
  | { type: 'closed' }
  | { type: 'failed'; message: string; code?: string };

/** A server thread started ahead of its options (see {@link prestartServerThread}), and what it did before anyone listened. */
let prestarted: { worker: Worker; early: Array<['error', Error] | ['exit', number]> } | undefined;

function serverWorker(): Worker {
  const { entry, eval: fromSources } = threadEntry(import.meta.url, 'server-worker');
  return new Worker(entry, { eval: fromSources, resourceLimits: { maxYoungGenerationSizeMb: YOUNG_GENERATION_MB } });
}

/**
 * Starts the server thread before its options are known: `svcq serve` calls this as soon as it
 * sees its command, so that the thread loads the server's modules (some 70 ms) while oclif loads
 * and parses the flags on this one. The thread waits for {@link startServerThread} to send the
 * options. Until then it does not keep the process alive: a `svcq serve --help` ends as usual.
 */
export function prestartServerThread(): void {
  if (prestarted) return;
  const worker = serverWorker();
  const early: Array<['error', Error] | ['exit', number]> = [];
  worker.on('error', (err) => early.push(['error', err]));
  worker.on('exit', (code) => early.push(['exit', code]));
  worker.unref();
  prestarted = { worker, early };
}

/**
 * `startServer` on a worker thread with a larger young generation (`svcq serve` runs this way):
 * the thread {@link prestartServerThread} started, or a new one. Resolves once it listens; a
 * failure to start rejects with the original message and `code`. If the thread dies later (an
 * uncaught error), `onCrash` is told.
 */
export function startServerThread(options: Omit<ServeOptions, 'warn'>, onCrash: (err: Error) => void): Promise<RunningServer> {
  const taken = prestarted;
  prestarted = undefined;
  const worker = taken?.worker ?? serverWorker();
  worker.removeAllListeners();
  worker.ref();
  let closing: Promise<void> | undefined;
  let onClosed: (err?: Error) => void = () => {};
  return new Promise<RunningServer>((resolve, reject) => {
    let started = false;
    worker.on('message', (message: FromServerThread) => {
      if (message.type === 'listening') {
        started = true;
        const { url, port, masterToken, masterTokenFile, masterTokenCreated } = message;
        resolve({
          url,
          port,
          masterToken,
          masterTokenFile,
          masterTokenCreated,
          close: () =>
            (closing ??= new Promise<void>((done, fail) => {
              onClosed = (err) => (err ? fail(err) : done());
              worker.postMessage({ type: 'close' } satisfies ToServerThread);
            })),
        });
      } else if (message.type === 'closed') {
        onClosed();
      } else if (!started) {
        reject(Object.assign(new Error(message.message), { code: message.code }));
      } else {
        onClosed(new Error(message.message));
      }
    });
    worker.on('error', (err) => {
      if (!started) reject(err);
      else if (closing) onClosed(err);
      else onCrash(err);
    });
    worker.on('exit', (code) => {
      if (!started) reject(new Error(`the server thread exited (${code}) before it listened`));
      // Settles a close the thread did not see through (a no-op once it has answered).
      else if (closing) onClosed(code === 0 ? undefined : new Error(`the server thread exited (${code}) while closing`));
      else onCrash(new Error(`the server thread exited (${code})`));
    });
    // What a thread started ahead did before these listeners: it failed to load, say.
    for (const [event, value] of taken?.early ?? []) worker.emit(event, value);
    worker.postMessage({ type: 'start', options } satisfies ToServerThread);
  });
}
