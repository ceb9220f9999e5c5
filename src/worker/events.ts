/** The worker's events and sink live with the loop they come from (src/client/work-loop.ts). */
export { tally, type WorkerEvent, type WorkerSink } from '../client/work-events.js';
