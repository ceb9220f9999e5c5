import type { BatchAnswer, BatchEntryAnswer, PostAnswer } from '../protocol.js';

/** Most items one coalesced batch carries (decisions §3.8: 1–1000). */
export const COALESCE_MAX_ITEMS = 1000;
/** Most bytes of items one coalesced batch carries: well inside the server's 16 MiB for a batch. */
export const COALESCE_MAX_BYTES = 4 * 1024 * 1024;

/** How a coalescer sends what it gathered: one item as a plain post, several as one batch. */
export interface CoalescedSend {
  one(queue: string, query: string, text: string): Promise<PostAnswer>;
  many(queue: string, query: string, texts: string[]): Promise<BatchAnswer>;
  /** The error a call fails with when its batch entry was refused (as a plain post's 400 would be). */
  refused(entry: Extract<BatchEntryAnswer, { ok: false }>): Error;
}

interface Waiting {
  text: string;
  bytes: number;
  resolve: (answer: PostAnswer) => void;
  reject: (err: unknown) => void;
}

/** The posts of one queue with one set of options: only those may share a batch (decisions §8.1). */
interface Lane {
  waiting: Waiting[];
  bytes: number;
  /** A send of this lane is on its way: posts made meanwhile wait for it, and then go together. */
  inFlight: boolean;
  /** A flush is due at the end of the linger. */
  scheduled: boolean;
}

/**
 * Gathers posts into batches (decisions §3.8 `POST /<queue>/batch`): a post made while an earlier
 * post of the same queue and options is on its way waits for it, then goes out with every other
 * post made meanwhile; a post made with nothing on its way waits one turn of the event loop (the
 * linger: `setImmediate`), so that posts made together (a loop, `Promise.all`) go together. A post
 * that finds itself alone goes out as a plain post. Each call settles with its own item's answer,
 * once the batch is durable.
 */
export class PostCoalescer {
  private readonly lanes = new Map<string, Lane>();

  constructor(private readonly send: CoalescedSend) {}

  post(queue: string, query: string, text: string): Promise<PostAnswer> {
    const key = `${queue}\n${query}`;
    let lane = this.lanes.get(key);
    if (!lane) {
      lane = { waiting: [], bytes: 0, inFlight: false, scheduled: false };
      this.lanes.set(key, lane);
    }
    const bytes = Buffer.byteLength(text);
    const answer = new Promise<PostAnswer>((resolve, reject) => lane.waiting.push({ text, bytes, resolve, reject }));
    lane.bytes += bytes;
    this.schedule(key, lane, queue, query);
    return answer;
  }

  private schedule(key: string, lane: Lane, queue: string, query: string): void {
    if (lane.inFlight || lane.scheduled || lane.waiting.length === 0) return;
    lane.scheduled = true;
    setImmediate(() => {
      lane.scheduled = false;
      void this.flush(key, lane, queue, query);
    });
  }

  private async flush(key: string, lane: Lane, queue: string, query: string): Promise<void> {
    // As many as one batch may carry, in the order they were made.
    let n = 0;
    let bytes = 0;
    while (n < lane.waiting.length && n < COALESCE_MAX_ITEMS && (n === 0 || bytes + lane.waiting[n]!.bytes <= COALESCE_MAX_BYTES)) bytes += lane.waiting[n++]!.bytes;
    const going = lane.waiting.splice(0, n);
    lane.bytes -= bytes;
    lane.inFlight = true;
    try {
      if (going.length === 1) {
        const one = going[0]!;
        await this.send.one(queue, query, one.text).then(one.resolve, one.reject);
      } else {
        let answer: BatchAnswer;
        try {
          answer = await this.send.many(queue, query, going.map((w) => w.text));
        } catch (err) {
          // The whole batch failed (the server could not be reached, refused an option): so did each post in it.
          for (const w of going) w.reject(err);
          return;
        }
        going.forEach((w, i) => {
          const entry = answer.items[i];
          if (entry === undefined) w.reject(new Error(`the batch's answer has no entry for item ${i}`));
          else if (entry.ok) w.resolve({ ok: true, id: entry.id, status: entry.status });
          else w.reject(this.send.refused(entry));
        });
      }
    } finally {
      lane.inFlight = false;
      if (lane.waiting.length === 0) this.lanes.delete(key);
      // Posts made while this one was on its way go now, together.
      else this.schedule(key, lane, queue, query);
    }
  }
}
