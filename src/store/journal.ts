import { open as openCallback, read, close as closeCallback } from 'node:fs';
import { readdir, rm, rename, open, truncate } from 'node:fs/promises';
import path from 'node:path';
import { Low } from 'lowdb';
import { JSONFile } from 'lowdb/node';
import type { TaskEvent } from '../engine/item.js';
import { Item, type FlowState, type LeaseMark } from '../engine/queue.js';
import { fsyncDir, makeDir, removeDurably } from '../durable-files.js';
import { AppendFile, type AppendFileOptions, type WriteFn } from './append-file.js';
import { jsonString } from '../json-text.js';
import type { ScheduleState } from '../engine/schedules.js';
import type { DeadLetterSource } from '../engine/rules.js';
import type { OwedCallback } from './store.js';

/**
 * The embedded store's files, in `<root>/_svcq/store/`:
 *
 * - `journal-N.jsonl`: every change, one record per line (below), appended and group-committed.
 * - `snapshot-N.jsonl`: every live item as of the moment journal-N was started, streamed line by
 *   line and renamed into place once complete and fsynced.
 * - `meta.json` (lowdb): which generation N is current. It is switched only once snapshot-N is
 *   safely on disk, and older files are removed only after that.
 *
 * Start-up loads snapshot-N and replays journal-N, then any later journal (a crash while a
 * snapshot was being written leaves one). Records carry an item's whole state, so replaying a
 * record twice, or over a snapshot line written later than it, converges on the last state.
 *
 * Why not one lowdb JSON document per queue, rewritten on every change: that costs O(backlog)
 * per request, and a single JSON string of a million items runs into V8's string length limit.
 */

// Records, one per line:
//   ["p", queue, id, ord, postedBy, postedAt, idempotencyKey, ...state, n] TAB body
//                                   a whole item (post, snapshot); its body follows the tab as posted, n UTF-16 units
//   ["i", queue, id, ord, body, postedBy, postedAt, idempotencyKey, ...state]  the same, for a body that holds a line break
//   either with priority and group after the rest (["p", …, n, priority, group]): an item posted with
//                                   them (decisions §8.1); an item of priority 0 and no group has neither
//   ["u", queue, id, ...state]                                                an item's state after a change
//   ["d", queue, id]                                                          the item is gone (retention, a redrive)
//   ["k", queue, id, deadLetterId, source]
//                                   decisions §8.6: the item's dead-letter links (the id of its copy, or null; a dead
//                                   letter's source object, or null), right after the item's own record whenever it has any
//   ["c", queue, id, url]           decisions §9.2: the item's own callback URL, right after its whole record (post, snapshot)
//                                   whenever it has one
//   ["o", id, queue, itemId, event, url, owedSince, dueAt, tries]
//                                   decisions §9.2: a callback owed (whole: replaying converges), written in the group
//                                   of the change that ended the item, and again as an attempt fails; a snapshot holds
//                                   one for each owed callback, before the items
//   ["o", id]                       the callback was delivered or dropped: forgotten
//   ["q", queue, paused]            the queue is paused (true) or not (false) from here on (decisions §8.4); a
//                                   snapshot holds one for each paused queue, before its items
//   ["s", queue, name, hash, passedAt, lastAt, lastId]
//                                   a schedule's state (decisions §8.3), written in the same group as the items
//                                   its occurrences posted; a snapshot holds one for each schedule, before the items
//   ["s", queue, name]              the schedule is no longer defined: its state is forgotten
//   ["l", queue, count, from, [n, at, group, ...]]
//                                   leases counted by a rate limit or fairness (decisions §8.5), written in the
//                                   group of the claim: each with its number, its time and the group whose turn it
//                                   was (null: no turns kept); `count` is the queue's lease count then, `from` the
//                                   first lease the rate window counts (null: no rate limit). With no leases: the
//                                   window started or ended
//   ["f", queue, count, from, [at, ...], [group, turn, ...]]
//                                   the same state whole, in a snapshot: the window's leases (the last ones,
//                                   numbered up to `count`) and every group's last turn
//   ["e", seq, [event, ...]]        task events, written with the change they describe; seq numbers the last
//   ["m", seq]                      the task history holds every event up to seq
//   ["m", seq, file, size]          the same, as builds before the history kept its own position wrote it: `file` then had `size` bytes
//   ["g"]                           the end of a group: the records since the one before were written whole, in one write
//
// Every group write ends with ["g"], and a journal opened for appending gets one first, so that
// whatever follows a ["g"] and is not followed by one is a group whose write never finished (a
// crash cut it short, or it failed and nobody was told it was durable): start-up drops it whole,
// never part of it. Records before a journal's first ["g"] were written by builds before groups
// were marked, and are read as they come.
type StateFields = [Item['status'], number, number | null, number, string | null, number | null, number, string | null, string | null, string | null, number | null];

function applyState(item: Item, s: StateFields): void {
  [item.status, item.updatedAt, item.finishedAt, item.attempts, item.leaseWorker, item.leaseUntil, item.availableAt, item.progress, item.result, item.error, item.fetchedAt] = s;
}

/** JSON text of a string or null. */
function text(s: string | null): string {
  return s === null ? 'null' : jsonString(s);
}

// Records are written on every change, so they are built as text rather than through an array
// and JSON.stringify; only the strings that may need escaping go through JSON.stringify.
function stateText(item: Item): string {
  return `"${item.status}",${item.updatedAt},${item.finishedAt},${item.attempts},${text(item.leaseWorker)},${item.leaseUntil},${item.availableAt},${text(item.progress)},${text(item.result)},${text(item.error)},${item.fetchedAt}`;
}

/**
 * `queueJson` is the queue's key as JSON text (a quoted string). The body goes after a tab as it
 * was posted, unescaped: JSON text holds no raw tab outside its own whitespace and the fields
 * before it hold none at all, so the first tab is where the body starts; only a body that holds a
 * line break (whitespace in pretty-printed JSON) is written as an escaped string instead. A
 * snapshot is one of these per item, so for a million waiting items this is most of its work.
 */
export function itemRecord(queueJson: string, item: Item): string {
  const { body } = item;
  const ranked = !item.untouched && (item.priority !== 0 || item.group !== null) ? `,${item.priority},${text(item.group)}` : '';
  if (body.includes('\n')) {
    return `["i",${queueJson},"${item.id}",${item.ord},${JSON.stringify(body)},${jsonString(item.postedBy)},${item.postedAt},${text(item.idempotencyKey)},${stateText(item)}${ranked}]\n${linksText(queueJson, item)}${callbackText(queueJson, item)}`;
  }
  const at = `${item.postedAt}`;
  // An item as posted (nothing has worked on it yet) has the default state: no getter calls.
  const state = item.untouched ? `"${item.status}",${at},null,0,null,null,0,null,null,null,null` : stateText(item);
  return `["p",${queueJson},"${item.id}",${item.ord},${jsonString(item.postedBy)},${at},${text(item.idempotencyKey)},${state},${body.length}${ranked}]\t${body}\n${linksText(queueJson, item)}${callbackText(queueJson, item)}`;
}

/** decisions §9.2: the item's own callback URL record, or nothing for the items without one. */
function callbackText(queueJson: string, item: Item): string {
  if (item.untouched) return '';
  const url = item.callback;
  return url === null ? '' : `["c",${queueJson},"${item.id}",${jsonString(url)}]\n`;
}

/** decisions §9.2: an owed callback whole, or (`c` a string, its id) its end. */
export function callbackRecord(c: OwedCallback | string): string {
  if (typeof c === 'string') return `["o","${c}"]\n`;
  return `["o","${c.id}",${jsonString(c.queue)},"${c.itemId}","${c.event}",${jsonString(c.url)},${c.owedSince},${c.dueAt},${c.tries}]\n`;
}

export function updateRecord(queueJson: string, item: Item): string {
  return `["u",${queueJson},"${item.id}",${stateText(item)}]\n${linksText(queueJson, item)}`;
}

/** decisions §8.6: the item's dead-letter links record, or nothing for the (nearly all) items without any. */
function linksText(queueJson: string, item: Item): string {
  if (item.untouched) return '';
  const links = item.links;
  if (links === null) return '';
  return `["k",${queueJson},"${item.id}",${text(links.deadLetterId)},${links.source === null ? 'null' : JSON.stringify(links.source)}]\n`;
}

export function deleteRecord(queueJson: string, id: string): string {
  return `["d",${queueJson},"${id}"]\n`;
}

/**
 * The events record, `["e",<number of the last event>,[<events>]]`, around the events' own JSON
 * texts (comma-separated, in pieces: see TEXT_PIECE) so that each is serialised once.
 */
export function eventsRecord(lastSeq: number, eventList: readonly string[]): string[] {
  return [`["e",${lastSeq},[`, ...eventList, ']]\n'];
}

export function markRecord(mark: HistoryMark): string {
  return `["m",${mark.seq}]\n`;
}

/** The queue's pause (decisions §8.4): its whole state, so that replaying it again converges as item records do. */
export function pausedRecord(queueJson: string, paused: boolean): string {
  return `["q",${queueJson},${paused}]\n`;
}

/** A schedule's state (decisions §8.3), or its end (`state` null): the whole of it, so that replaying converges. */
export function scheduleRecord(queueJson: string, name: string, state: ScheduleState | null): string {
  if (!state) return `["s",${queueJson},${jsonString(name)}]\n`;
  return `["s",${queueJson},${jsonString(name)},"${state.hash}",${state.passedAt},${state.lastAt},${state.lastId === null ? 'null' : `"${state.lastId}"`}]\n`;
}

/** Leases of a claim's commit (see the records above). A claim of up to max cut into steps may hold leases that are not consecutive. */
export function leaseRecord(queueJson: string, count: number, from: number | null, leases: readonly LeaseMark[]): string {
  let list = '';
  for (const l of leases) list += `${list === '' ? '' : ','}${l.n},${l.at},${text(l.group)}`;
  return `["l",${queueJson},${count},${from},[${list}]]\n`;
}

/** A queue's rate window and turns whole, for a snapshot. */
export function flowRecord(queueJson: string, count: number, from: number | null, times: readonly number[], stamps: ReadonlyMap<string, number>): string {
  let list = '';
  for (const [group, turn] of stamps) list += `${list === '' ? '' : ','}${jsonString(group)},${turn}`;
  return `["f",${queueJson},${count},${from},[${times.join(',')}],[${list}]]\n`;
}

/** Every live item found on disk, by queue. */
export type LoadedItems = Map<string, Map<string, Item>>;

/** What start-up found of items and queues. */
export interface LoadedState {
  items: LoadedItems;
  /** The keys of the queues paused as of the last record. */
  paused: Set<string>;
  /** The schedules' states as of the last record, by queue key, then by name. */
  schedules: Map<string, Map<string, ScheduleState>>;
  /** Rate windows and turns (decisions §8.5), by queue key. */
  flows: Map<string, FlowState>;
  /** decisions §9.2: the callbacks owed, by id. */
  callbacks: Map<string, OwedCallback>;
}

/**
 * The task history holds every event up to `seq`. `file` and `size` come only from stores written
 * by builds before the history kept its own position: where the history then ended.
 */
export interface HistoryMark {
  seq: number;
  file?: string;
  size?: number;
}

/** What start-up found besides items: the history's last known position and the events beyond it. */
export interface LoadedEvents {
  mark: HistoryMark | null;
  /** Batches of events after the mark, oldest first, each with the number of its last event. */
  pending: Array<[number, TaskEvent[]]>;
  /** The highest event number seen. */
  lastSeq: number;
}

interface Meta {
  format: 1;
  generation: number;
  snapshotAt: number | null;
  snapshotItems: number;
  /** The history's position when the snapshot was taken: events of older journals are all in it. */
  mark: HistoryMark | null;
}

export interface JournalOptions {
  dir: string;
  warn: (line: string) => void;
  /** Journal bytes past which a snapshot is taken (at least this, and at least four times the last snapshot). */
  compactBytes?: number;
  /** Told synchronously when a write fails: every append not yet on disk has been dropped (see AppendFile). */
  onFailure?: (err: Error) => void;
  /** The write system call, for tests that make it fail. */
  write?: WriteFn;
  /** Told of every group commit: its write time and how many appends it carried. */
  onGroup?: (seconds: number, appends: number) => void;
}

/** Ends every group write, and starts every journal opened for appending (see the records above). */
export const GROUP_END = '["g"]\n';
const GROUP_END_BYTES = Buffer.from(GROUP_END);

/** Zeros kept written ahead of the journal's data, at most (see AppendFile): appends then change no file size. */
const JOURNAL_PREALLOCATE = 8 << 20;

/** The journal may grow to this many times the last snapshot before the next one. */
const SNAPSHOT_MULTIPLE = 4;

export class Journal {
  private meta!: Low<Meta>;
  private file!: AppendFile;
  private generation = 0;
  /** Number of the journal being appended to: the generation, or later after a crash mid-snapshot. */
  private current = 0;
  /**
   * Appends made while the previous journal writes its last group, at a switch to a new one: they
   * go to the new journal only once the old one is closed, so that nothing in the new journal can
   * be on disk before what it depends on in the old one, and a failure of that last group takes
   * them with it.
   */
  private held: { text: string; waiters: Array<{ resolve: () => void; reject: (err: Error) => void }> } | undefined;
  private snapshotBytes = 0;
  private compacting: Promise<void> | undefined;
  private readonly compactBytes: number;
  /** Counts failed writes: a snapshot during which one failed may hold changes that were taken back. */
  private failures = 0;

  constructor(private readonly options: JournalOptions) {
    this.compactBytes = options.compactBytes ?? 64 * 1024 * 1024;
  }

  private fileOptions(): AppendFileOptions {
    return {
      preallocate: JOURNAL_PREALLOCATE,
      warn: this.options.warn,
      write: this.options.write,
      onGroup: this.options.onGroup,
      groupEnd: GROUP_END_BYTES,
      onFailure: (err) => {
        this.failures++;
        this.options.onFailure?.(err);
        // Appends held for the next journal were made before this failure: they fail with it.
        const held = this.held;
        if (held) {
          const waiters = held.waiters;
          held.text = '';
          held.waiters = [];
          for (const w of waiters) w.reject(err);
        }
      },
    };
  }

  /**
   * Opens a journal for appending. Its first bytes from now on are a group end (unless its data
   * ends with one, `marked`): what it held
   * before (even records of a build that did not mark groups) is whole, and every group after it
   * is read only once its own end is on disk.
   */
  private async openFile(file: string, marked = false): Promise<AppendFile> {
    const appender = await AppendFile.open(file, this.fileOptions());
    // In front of the first group written, in its write: never a write of its own, whose failure
    // (at a switch to a new journal, say) would take back changes of the previous journal's last group.
    if (!marked) appender.prefixFirstWrite(GROUP_END_BYTES);
    return appender;
  }

  /** Loads snapshot and journals and opens the journal for appending. */
  async open(): Promise<{ items: LoadedItems; paused: Set<string>; schedules: LoadedState['schedules']; flows: LoadedState['flows']; callbacks: LoadedState['callbacks']; events: LoadedEvents }> {
    const { dir, warn } = this.options;
    await makeDir(dir);
    this.meta = new Low<Meta>(new JSONFile<Meta>(path.join(dir, 'meta.json')), { format: 1, generation: 0, snapshotAt: null, snapshotItems: 0, mark: null });
    try {
      await this.meta.read();
    } catch (err) {
      // meta.json is renamed into place before it is synced: a power cut can leave it empty. The
      // newest snapshot on disk is complete (it is synced before its rename, and before meta.json
      // names it), so it is the current generation.
      const newest = Math.max(0, ...(await readdir(dir)).map((f) => Number(/^snapshot-(\d+)\.jsonl$/.exec(f)?.[1] ?? 0)));
      warn(`meta.json could not be read (${(err as Error).message}); using snapshot generation ${newest}`);
      this.meta.data = { format: 1, generation: newest, snapshotAt: null, snapshotItems: 0, mark: null };
    }
    this.generation = this.meta.data.generation;

    const items: LoadedItems = new Map();
    const state: LoadedState = { items, paused: new Set(), schedules: new Map(), flows: new Map(), callbacks: new Map() };
    const mark = this.meta.data.mark ?? null;
    const events: LoadedEvents = { mark, pending: [], lastSeq: mark?.seq ?? 0 };
    const snapshot = path.join(dir, `snapshot-${this.generation}.jsonl`);
    if (this.generation > 0) {
      const loaded = await readRecords(snapshot, state, events, warn, false);
      this.snapshotBytes = loaded.bytes;
    }
    const journals = (await readdir(dir))
      .map((f) => /^journal-(\d+)\.jsonl$/.exec(f))
      .filter((m): m is RegExpExecArray => m !== null && Number(m[1]) >= this.generation)
      .map((m) => Number(m[1]))
      .sort((a, b) => a - b);
    // Left over by a crash mid-snapshot: a snapshot that was never made current, its temp file, or
    // files of the generation before that were not removed yet.
    for (const f of await readdir(dir)) {
      const m = /^(journal|snapshot)-(\d+)\.jsonl(\.tmp)?$/.exec(f);
      if (!m) continue;
      const n = Number(m[2]);
      const stale = m[3] !== undefined || (m[1] === 'snapshot' ? n !== this.generation : n < this.generation);
      if (stale) await rm(path.join(dir, f), { force: true });
    }
    let last = this.generation;
    let marked = false;
    for (const n of journals) {
      marked = (await readRecords(path.join(dir, `journal-${n}.jsonl`), state, events, warn, true)).endsWithGroupEnd;
      last = n;
    }
    // Appending goes on in the newest journal, which covers everything since the current snapshot.
    // Its open syncs the folder: the stale files removed above stay removed after a power cut.
    this.file = await this.openFile(path.join(dir, `journal-${last}.jsonl`), marked);
    this.current = last;
    return { items, paused: state.paused, schedules: state.schedules, flows: state.flows, callbacks: state.callbacks, events };
  }

  /**
   * Appends records; resolves once they are on disk, in the order appended. Rejects when the
   * write fails, after `onFailure` was told; so does every append made before that failure and
   * not yet on disk.
   */
  append(records: string | readonly string[]): Promise<void> {
    const held = this.held;
    if (!held) return this.file.append(records);
    return new Promise((resolve, reject) => {
      held.text += typeof records === 'string' ? records : records.join('');
      held.waiters.push({ resolve, reject });
    });
  }

  /** Appends records that nobody waits for (time-driven changes); they go with the next group. */
  appendLater(records: string): void {
    if (this.held) this.held.text += records;
    else this.file.appendLater(records);
  }

  /** Resolves once everything appended so far is on disk. */
  sync(): Promise<void> {
    return this.held ? this.append('') : this.file.sync();
  }

  /** True when the journal has grown enough that a snapshot would pay for itself. */
  wantsSnapshot(): boolean {
    // Four times the snapshot: writing a snapshot costs about as much as writing its size in
    // journal records, so this keeps its share of the work near a fifth, and the disk near five
    // times the live items.
    return !this.compacting && this.file.size > Math.max(this.compactBytes, SNAPSHOT_MULTIPLE * this.snapshotBytes);
  }

  /**
   * Starts a new generation: appends go to a new journal from now on, and `items` (all live
   * items, iterated while the server keeps running) are streamed into the new snapshot, after the
   * records `queues` gives of the queues' own state (their pauses) as it is then.
   */
  snapshot(items: () => Iterable<[queueJson: string, item: Item]>, historyMark: () => Promise<HistoryMark | null>, queues: () => string = () => ''): Promise<void> {
    if (this.compacting) return this.compacting;
    this.compacting = this.writeSnapshot(items, historyMark, queues).finally(() => {
      this.compacting = undefined;
    });
    return this.compacting;
  }

  /**
   * `historyMark` resolves once the task history holds every event handed to it so far (all of
   * them in journals older than the new one), with its position: the older journals can go.
   */
  private async writeSnapshot(items: () => Iterable<[queueJson: string, item: Item]>, historyMark: () => Promise<HistoryMark | null>, queues: () => string): Promise<void> {
    const { dir } = this.options;
    const next = this.current + 1;
    const failuresBefore = this.failures;
    // The new journal's name survives a crash before it holds acknowledged records (the open syncs the folder).
    const file = await this.openFile(path.join(dir, `journal-${next}.jsonl`));
    const previous = this.file;
    const held: NonNullable<Journal['held']> = { text: '', waiters: [] };
    this.held = held;
    this.file = file;
    this.current = next;
    const closed = await previous.close().then(
      () => undefined,
      (err: Error) => err,
    );
    this.held = undefined;
    // A failed last group has already failed what was held with it; what is held now came after.
    if (closed && this.failures === failuresBefore) this.options.warn(`the previous journal did not close cleanly: ${closed.message}`);
    // Their waiters join the new journal's own, ahead of any append made from now on: appends
    // resolve in the order they were made (the store's outbox of task events relies on it).
    if (held.text !== '' || held.waiters.length > 0) file.appendFor(held.text, held.waiters);
    const mark = await historyMark();

    const tmp = path.join(dir, `snapshot-${next}.jsonl.tmp`);
    const handle = await open(tmp, 'w', 0o644);
    let bytes = 0;
    let count = 0;
    try {
      // Read after the switch, like the items: a record of the new journal that changed a pause
      // since is replayed over it, and records carry the whole state, so both orders converge.
      let chunk = queues();
      for (const [queue, item] of items()) {
        chunk += itemRecord(queue, item);
        count++;
        if (chunk.length > 1 << 20) {
          bytes += (await handle.write(chunk)).bytesWritten;
          chunk = '';
          // Let requests run between chunks; the iteration tolerates changes made meanwhile.
          await new Promise((resolve) => setImmediate(resolve));
        }
      }
      if (chunk) bytes += (await handle.write(chunk)).bytesWritten;
      await handle.sync();
    } catch (err) {
      await handle.close();
      await rm(tmp, { force: true });
      throw err;
    }
    await handle.close();
    // The snapshot read items as they were in memory, changes still being written included. It
    // may stand for them only once every one of those is on disk: a write that failed meanwhile
    // had its changes taken back, and the snapshot must not bring them back after a restart.
    await this.file.sync().catch(() => undefined);
    if (this.failures !== failuresBefore) {
      await rm(tmp, { force: true });
      throw new Error('a journal write failed while the snapshot was written; the snapshot was dropped');
    }
    await rename(tmp, path.join(dir, `snapshot-${next}.jsonl`));
    await fsyncDir(dir);

    this.meta.data = { format: 1, generation: next, snapshotAt: Date.now(), snapshotItems: count, mark };
    await this.meta.write();
    const metaHandle = await open(path.join(dir, 'meta.json'), 'r');
    await metaHandle.sync();
    await metaHandle.close();
    await fsyncDir(dir);
    this.generation = next;
    this.snapshotBytes = bytes;

    // Everything numbered below the new generation is covered by the new snapshot.
    await removeDurably(
      dir,
      (await readdir(dir)).filter((f) => {
        const m = /^(journal|snapshot)-(\d+)\.jsonl$/.exec(f);
        return m !== null && Number(m[2]) < next;
      }),
    );
  }

  async close(): Promise<void> {
    await this.compacting?.catch(() => undefined);
    await this.file.close();
  }
}

/**
 * Reads one file of records into `items`. A torn or unparsable last record (a crash mid-write)
 * is skipped with one warning, and cut off a journal so that appending continues cleanly; one
 * in the middle is skipped with a warning. Records after a group end (`["g"]`) are applied only
 * once the next group end is read: a last group without its end (a write a crash cut short, or
 * one that failed) is dropped whole, with a warning, and cut off too.
 */
async function readRecords(file: string, state: LoadedState, events: LoadedEvents, warn: (line: string) => void, truncateTorn: boolean): Promise<{ bytes: number; endsWithGroupEnd: boolean }> {
  let fd: number;
  try {
    fd = await new Promise<number>((resolve, reject) => openCallback(file, 'r', (err, fd) => (err ? reject(err) : resolve(fd))));
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return { bytes: 0, endsWithGroupEnd: false };
    throw err;
  }
  const chunkSize = 16 * 1024 * 1024;
  let buffer = Buffer.alloc(chunkSize);
  let filled = 0;
  let offset = 0; // file offset of buffer[0]
  let good = 0; // file offset just past the last good record
  let lineNo = 0;
  let torn: string | undefined;
  let zeros = false;
  /** A group end was read: records wait for the next one before they are applied. */
  let framed = false;
  /** The records of the group being read (parsed, and the body after the tab). */
  let group: Array<[unknown[], string | undefined]> = [];
  let groupLines = 0;
  /** The last record kept was a group end. */
  let lastWasEnd = false;
  try {
    for (;;) {
      if (filled === buffer.length) {
        // A single record larger than the buffer: grow it.
        const bigger = Buffer.alloc(buffer.length * 2);
        buffer.copy(bigger, 0, 0, filled);
        buffer = bigger;
      }
      let n = await new Promise<number>((resolve, reject) => read(fd, buffer, filled, buffer.length - filled, offset + filled, (err, n) => (err ? reject(err) : resolve(n))));
      // The journal is kept zero-filled ahead of its data (AppendFile's preallocation): the first
      // NUL byte is where the data ends. Records never hold one (JSON escapes control characters).
      const nul = buffer.subarray(filled, filled + n).indexOf(0);
      if (nul !== -1) {
        n = nul;
        zeros = true;
      }
      filled += n;
      let start = 0;
      for (;;) {
        const end = buffer.indexOf(10, start);
        if (end === -1 || end >= filled) break;
        lineNo++;
        // A whole item's body follows a tab (see itemRecord); it is decoded on its own, so that the
        // item keeps a string of just its body rather than a slice that holds on to the line.
        let tab = -1;
        if (buffer[start + 2] === P && buffer[start] === OPEN && buffer[start + 1] === QUOTE) {
          tab = buffer.subarray(start, end).indexOf(TAB);
          if (tab !== -1) tab += start;
        }
        const line = tab === -1 ? buffer.toString('utf8', start, end) : buffer.toString('utf8', start, tab);
        const body = tab === -1 ? undefined : buffer.toString('utf8', tab + 1, end);
        let ok: boolean;
        if (body === undefined && line === GROUP_END_TEXT) {
          // The group before it is whole: its records count now.
          for (const [r, b] of group) if (!applyRecord(r, b, state, events)) warn(`${path.basename(file)}: a record of a whole group is corrupt and was skipped`);
          group = [];
          groupLines = 0;
          framed = true;
          ok = true;
        } else {
          const record = parseRecord(line);
          if (record === null) ok = false;
          else if (framed) {
            // Applied at its group's end, once the group is known to be whole.
            group.push([record, body]);
            groupLines++;
            ok = true;
          } else ok = applyRecord(record, body, state, events);
        }
        if (!ok) {
          if (torn !== undefined) warn(`${path.basename(file)}: record ${lineNo - 1} is corrupt and was skipped`);
          torn = `${path.basename(file)}: record ${lineNo} is corrupt`;
        } else {
          if (torn !== undefined) warn(`${torn} and was skipped`);
          torn = undefined;
          if (!framed || group.length === 0) {
            good = offset + end + 1;
            lastWasEnd = framed;
          }
        }
        start = end + 1;
      }
      if (n === 0 || zeros) {
        if (start < filled) torn = `${path.basename(file)}: the last record is torn (${filled - start} bytes without an end)`;
        break;
      }
      buffer.copy(buffer, 0, start, filled);
      offset += start;
      filled -= start;
    }
  } finally {
    await new Promise<void>((resolve) => closeCallback(fd, () => resolve()));
  }
  if (torn !== undefined) warn(`${torn}; skipped${truncateTorn ? ' and cut off' : ''}`);
  const unfinished = groupLines > 0;
  if (unfinished) warn(`${path.basename(file)}: the last write never finished (no group end after its ${groupLines} record(s)); none of it was acknowledged, so all of it was dropped${truncateTorn ? ' and cut off' : ''}`);
  // Zeros ahead of the data are cut off too (a crash left them): appending starts right after the last good record.
  if (truncateTorn && (torn !== undefined || zeros || unfinished)) await truncate(file, good);
  return { bytes: good, endsWithGroupEnd: lastWasEnd };
}

const GROUP_END_TEXT = GROUP_END.slice(0, -1);

/** A record's fields, or null for a line that is not a JSON array. */
function parseRecord(text: string): unknown[] | null {
  try {
    const record: unknown = JSON.parse(text);
    return Array.isArray(record) ? record : null;
  } catch {
    return null;
  }
}

const OPEN = 0x5b; // [
const QUOTE = 0x22; // "
const P = 0x70; // p
const TAB = 0x09;

/** An item's priority and group, as a record carries them after its other fields. */
function ranked(item: Item, priority: unknown, group: unknown): void {
  if (typeof priority === 'number') item.priority = priority;
  if (typeof group === 'string') item.group = group;
}

/** Applies one record: the fields of the line (or of the part before the tab, when a `body` follows it). */
function applyRecord(record: unknown[], body: string | undefined, state: LoadedState, events: LoadedEvents): boolean {
  if (record[0] === 'e' && record.length === 3 && typeof record[1] === 'number' && Array.isArray(record[2])) {
    const seq = record[1];
    if (seq > (events.mark?.seq ?? 0)) events.pending.push([seq, record[2] as TaskEvent[]]);
    if (seq > events.lastSeq) events.lastSeq = seq;
    return true;
  }
  // ["m", seq], or ["m", seq, file, size] as stores written before kept it (the position is the history's own business now).
  if (record[0] === 'm' && (record.length === 2 || record.length === 4) && typeof record[1] === 'number') {
    const mark: HistoryMark = record.length === 4 && typeof record[2] === 'string' && typeof record[3] === 'number' ? { seq: record[1], file: record[2], size: record[3] } : { seq: record[1] };
    if (mark.seq >= (events.mark?.seq ?? 0)) {
      // Every event up to mark.seq is in the history; later batches may precede this line.
      events.mark = mark;
      events.pending = events.pending.filter(([seq]) => seq > mark.seq);
    }
    return true;
  }
  if (record[0] === 'q' && record.length === 3 && typeof record[1] === 'string' && typeof record[2] === 'boolean') {
    if (record[2]) state.paused.add(record[1]);
    else state.paused.delete(record[1]);
    return true;
  }
  if (record[0] === 's' && typeof record[1] === 'string' && typeof record[2] === 'string') {
    let byName = state.schedules.get(record[1]);
    if (!byName) state.schedules.set(record[1], (byName = new Map()));
    if (record.length === 3) byName.delete(record[2]);
    else if (record.length === 7 && typeof record[3] === 'string' && typeof record[4] === 'number') {
      byName.set(record[2], { hash: record[3], passedAt: record[4], lastAt: typeof record[5] === 'number' ? record[5] : null, lastId: typeof record[6] === 'string' ? record[6] : null });
    } else return false;
    return true;
  }
  if (record[0] === 'o' && typeof record[1] === 'string') {
    if (record.length === 2) state.callbacks.delete(record[1]);
    else if (record.length === 9 && typeof record[2] === 'string' && typeof record[3] === 'string' && typeof record[4] === 'string' && typeof record[5] === 'string') {
      const [, id, queue, itemId, event, url, owedSince, dueAt, tries] = record as [string, string, string, string, OwedCallback['event'], string, number, number, number];
      state.callbacks.set(id, { id, queue, itemId, event, url, owedSince, dueAt, tries });
    } else return false;
    return true;
  }
  if ((record[0] === 'l' || record[0] === 'f') && record.length >= 5 && typeof record[1] === 'string' && typeof record[2] === 'number' && (record[3] === null || typeof record[3] === 'number') && Array.isArray(record[4])) {
    return applyFlow(record, state);
  }
  if (typeof record[1] !== 'string' || typeof record[2] !== 'string') return false;
  const [type, queue, id] = record as [string, string, string];
  const items = state.items;
  let byId = items.get(queue);
  if (!byId) items.set(queue, (byId = new Map()));
  if (type === 'p' && (record.length === 19 || record.length === 21) && body !== undefined && body.length === record[18]) {
    const r = record as [string, string, string, number, string, number, string | null, ...StateFields, number];
    const item = new Item(id, r[3], body, r[4], r[5], r[7]);
    item.idempotencyKey = r[6];
    applyState(item, r.slice(7, 18) as StateFields);
    if (record.length === 21) ranked(item, record[19], record[20]);
    byId.set(id, item);
    return true;
  }
  if (body !== undefined) return false;
  if (type === 'i' && (record.length === 19 || record.length === 21)) {
    const r = record as [string, string, string, number, string, string, number, string | null, ...StateFields];
    const item = new Item(id, r[3], r[4], r[5], r[6], r[8]);
    item.idempotencyKey = r[7];
    applyState(item, r.slice(8, 19) as StateFields);
    if (record.length === 21) ranked(item, record[19], record[20]);
    byId.set(id, item);
    return true;
  }
  if (type === 'u' && record.length === 14) {
    const item = byId.get(id);
    if (item) applyState(item, record.slice(3) as StateFields);
    return true;
  }
  if (type === 'k' && record.length === 5) {
    const item = byId.get(id);
    const source = record[4] as DeadLetterSource | null;
    if (item) item.links = { deadLetterId: typeof record[3] === 'string' ? record[3] : null, source: source !== null && typeof source === 'object' ? source : null };
    return true;
  }
  if (type === 'c' && record.length === 4 && typeof record[3] === 'string') {
    const item = byId.get(id);
    if (item) item.callback = record[3];
    return true;
  }
  if (type === 'd' && record.length === 3) {
    byId.delete(id);
    return true;
  }
  return false;
}

/** Applies an "l" or "f" record (see the records above) to the queue's rate window and turns. */
function applyFlow(record: unknown[], state: LoadedState): boolean {
  const queue = record[1] as string;
  const count = record[2] as number;
  const from = record[3] as number | null;
  const list = record[4] as unknown[];
  if (record[0] === 'f') {
    if (record.length !== 6 || !Array.isArray(record[5])) return false;
    const pairs = record[5] as unknown[];
    const stamps = new Map<string, number>();
    for (let i = 0; i + 1 < pairs.length; i += 2) stamps.set(String(pairs[i]), Number(pairs[i + 1]));
    state.flows.set(queue, { count, from, times: list.map((t, i) => [count - list.length + 1 + i, Number(t)]), stamps, base: count });
    return true;
  }
  if (record.length !== 5 || list.length % 3 !== 0) return false;
  let flow = state.flows.get(queue);
  if (!flow) state.flows.set(queue, (flow = { count: 0, from: null, times: [], stamps: new Map(), base: 0 }));
  for (let i = 0; i < list.length; i += 3) {
    const n = Number(list[i]);
    // Journalled after a snapshot that already counts it: once is enough.
    if (n <= (flow.base ?? 0)) continue;
    flow.times.push([n, Number(list[i + 1])]);
    const group = list[i + 2];
    if (typeof group === 'string' && n > (flow.stamps.get(group) ?? -Infinity)) flow.stamps.set(group, n);
  }
  if (count > flow.count) flow.count = count;
  if (from !== flow.from) {
    flow.from = from;
    flow.times = from === null ? [] : flow.times.filter(([n]) => n >= from);
  }
  return true;
}
