/**
 * The stats probes' own thread (see StatsThread in stats.ts): takes a snapshot for each numbered
 * request and answers with it.
 */
import { parentPort } from 'node:worker_threads';
import { takeSnapshot } from './stats.js';

const port = parentPort!;
port.on('message', (id: number) => {
  // takeSnapshot never fails: a probe that does reads as null.
  void takeSnapshot().then((snapshot) => port.postMessage({ id, snapshot }));
});
