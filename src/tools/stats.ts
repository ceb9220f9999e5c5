import { appendFile, statfs } from 'node:fs/promises';
import { makeDir } from '../durable-files.js';
import os from 'node:os';
import path from 'node:path';
import { Worker } from 'node:worker_threads';
import { threadEntry } from '../thread-entry.js';
import { parseStatFile, removeOldDayFiles, statFileName, utcDay, type StatType } from './files.js';

/** One core's cumulative times since boot, in ms (as `os.cpus()` counts them). */
export interface CoreTimes {
  user: number;
  nice: number;
  sys: number;
  idle: number;
  irq: number;
}

export interface CpuStats {
  model: string;
  cores: CoreTimes[];
}

/** Bytes. `used` is what is not available (page cache that can be dropped counts as available). */
export interface MemoryStats {
  total: number;
  used: number;
  available: number;
  free: number;
}

/** Bytes of the filesystem holding `/`; `free` is what an unprivileged writer can still use. */
export interface DiskStats {
  path: string;
  total: number;
  used: number;
  free: number;
}

/** Cumulative bytes since boot. */
export interface DiskIoStats {
  readBytes: number;
  writeBytes: number;
}

/** Cumulative bytes since boot over every interface but loopback. */
export interface NetIoStats {
  rxBytes: number;
  txBytes: number;
}

/** `GET /api/v2/stats/now` (interface §4.6). A metric the host cannot report is null. */
export interface Snapshot {
  /** Unix time in seconds. */
  ts: number;
  /** Seconds since boot. */
  uptime: number;
  hostname: string;
  /** 1, 5 and 15 minute load averages. */
  load: number[];
  cpu: CpuStats | null;
  memory: MemoryStats | null;
  disk: DiskStats | null;
  diskIo: DiskIoStats | null;
  netIo: NetIoStats | null;
}

/** What one line of a stats day-file holds besides its `ts` (ms), by type (decisions §5). */
export interface StatSamples {
  cpu: CpuStats;
  memory: MemoryStats;
  disk: DiskStats;
  diskio: DiskIoStats;
  netio: NetIoStats;
}

/** A probe that hangs (a stuck `lsblk`, a slow /proc) counts as a metric the host cannot report. */
const PROBE_TIMEOUT_MS = 5000;

async function probe<T>(read: () => Promise<T | null> | T | null): Promise<T | null> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<null>((resolve) => {
    timer = setTimeout(() => resolve(null), PROBE_TIMEOUT_MS);
    timer.unref();
  });
  try {
    return await Promise.race([Promise.resolve().then(read), timeout]);
  } catch {
    return null;
  } finally {
    clearTimeout(timer);
  }
}

function finite(...values: number[]): boolean {
  return values.every((v) => typeof v === 'number' && Number.isFinite(v));
}

function readCpu(): CpuStats | null {
  const cpus = os.cpus();
  if (cpus.length === 0) return null;
  return {
    model: cpus[0]!.model.trim(),
    cores: cpus.map(({ times }) => ({ user: times.user, nice: times.nice, sys: times.sys, idle: times.idle, irq: times.irq })),
  };
}

/**
 * systeminformation, loaded at the first probe that needs it: only the stats thread takes
 * snapshots, and the server thread, which starts that thread, need not load it too.
 */
type SystemInformation = typeof import('systeminformation');
let systemInformation: Promise<SystemInformation> | undefined;
const si = (): Promise<SystemInformation> => (systemInformation ??= import('systeminformation').then((m) => m.default));

async function readMemory(): Promise<MemoryStats | null> {
  const mem = await (await si()).mem().catch(() => null);
  if (mem && finite(mem.total, mem.available, mem.free) && mem.total > 0) {
    return { total: mem.total, used: mem.total - mem.available, available: mem.available, free: mem.free };
  }
  return osMemory();
}

function osMemory(): MemoryStats {
  const total = os.totalmem();
  const free = os.freemem();
  return { total, used: total - free, available: free, free };
}

async function readDisk(): Promise<DiskStats | null> {
  const fs = await statfs('/');
  const total = fs.blocks * fs.bsize;
  if (!finite(total) || total <= 0) return null;
  return { path: '/', total, used: (fs.blocks - fs.bfree) * fs.bsize, free: fs.bavail * fs.bsize };
}

async function readDiskIo(): Promise<DiskIoStats | null> {
  const io = await (await si()).fsStats();
  if (!io || !finite(io.rx, io.wx)) return null;
  return { readBytes: io.rx, writeBytes: io.wx };
}

/**
 * The bytes through the interfaces that have an address, loopback left out. They are named to
 * systeminformation rather than asked for as `*`: its `*` lists every interface first, through
 * shell commands (`nmcli`, DHCP leases …): 79 processes and 0.4 s of CPU at a server's first
 * sample on a two-core machine, 16 at later ones, where the named interfaces cost one shell each.
 */
async function readNetIo(): Promise<NetIoStats | null> {
  const names = Object.entries(os.networkInterfaces())
    .filter(([name, addresses]) => name !== 'lo' && (addresses ?? []).some((a) => !a.internal))
    .map(([name]) => name);
  if (names.length === 0) return null;
  const ifaces = (await (await si()).networkStats(names.join(','))).filter((n) => finite(n.rx_bytes, n.tx_bytes));
  if (ifaces.length === 0) return null;
  return { rxBytes: ifaces.reduce((sum, n) => sum + n.rx_bytes, 0), txBytes: ifaces.reduce((sum, n) => sum + n.tx_bytes, 0) };
}

/**
 * One live snapshot; every probe runs at once and none can make it fail. systeminformation runs
 * shell commands synchronously for some of them (`networkStats` blocked its thread for 55 ms on
 * the first call and 3–5 ms on later ones here): a server takes its snapshots on a
 * {@link StatsThread}, not on the thread that answers requests.
 */
export async function takeSnapshot(): Promise<Snapshot> {
  const [cpu, memory, disk, diskIo, netIo] = await Promise.all([probe(readCpu), probe(readMemory), probe(readDisk), probe(readDiskIo), probe(readNetIo)]);
  return snapshotOf({ cpu, memory, disk, diskIo, netIo });
}

/** What a snapshot says with no systeminformation probe (a stats thread that did not answer): I/O unknown. */
async function quickSnapshot(): Promise<Snapshot> {
  const [cpu, disk] = await Promise.all([probe(readCpu), probe(readDisk)]);
  return snapshotOf({ cpu, memory: osMemory(), disk, diskIo: null, netIo: null });
}

function snapshotOf(metrics: Pick<Snapshot, 'cpu' | 'memory' | 'disk' | 'diskIo' | 'netIo'>): Snapshot {
  const { cpu, memory, disk, diskIo, netIo } = metrics;
  const now = Date.now();
  return {
    ts: Math.floor(now / 1000),
    uptime: Math.floor(os.uptime()),
    hostname: os.hostname(),
    load: os.loadavg(),
    cpu,
    memory,
    disk,
    diskIo,
    netIo,
  };
}

/** The day-file lines of one snapshot, by type; a metric the host could not report has no line. */
export function samplesOf(snapshot: Snapshot): Partial<StatSamples> {
  const out: Partial<StatSamples> = {};
  if (snapshot.cpu) out.cpu = snapshot.cpu;
  if (snapshot.memory) out.memory = snapshot.memory;
  if (snapshot.disk) out.disk = snapshot.disk;
  if (snapshot.diskIo) out.diskio = snapshot.diskIo;
  if (snapshot.netIo) out.netio = snapshot.netIo;
  return out;
}

interface Asked {
  worker: Worker;
  timer: NodeJS.Timeout;
  resolve: (snapshot: Snapshot | Promise<Snapshot>) => void;
}

/**
 * Snapshots taken on a thread of their own, started at the first one. A thread that does not
 * answer within `timeoutMs` (a probe stuck in a synchronous shell command) is replaced, and that
 * snapshot says only what the calling thread can read at once, with I/O null; so does one whose
 * thread died. The thread never keeps the process alive.
 */
export class StatsThread {
  private worker: Worker | undefined;
  private next = 0;
  private closed = false;
  private readonly asked = new Map<number, Asked>();

  constructor(private readonly timeoutMs = PROBE_TIMEOUT_MS + 2000) {}

  snapshot(): Promise<Snapshot> {
    if (this.closed) return quickSnapshot();
    const worker = (this.worker ??= this.start());
    const id = ++this.next;
    return new Promise<Snapshot>((resolve) => {
      const timer = setTimeout(() => {
        this.asked.delete(id);
        this.drop(worker);
        resolve(quickSnapshot());
      }, this.timeoutMs);
      this.asked.set(id, { worker, timer, resolve });
      worker.postMessage(id);
    });
  }

  /** The thread's id while it runs (for tests: the probes do not run on the caller's thread). */
  get threadId(): number | undefined {
    return this.worker?.threadId;
  }

  async close(): Promise<void> {
    this.closed = true;
    const worker = this.worker;
    if (worker) {
      this.drop(worker);
      await worker.terminate();
    }
  }

  private start(): Worker {
    const { entry, eval: fromSources } = threadEntry(import.meta.url, 'stats-worker');
    const worker = new Worker(entry, { eval: fromSources });
    worker.unref();
    worker.on('message', ({ id, snapshot }: { id: number; snapshot: Snapshot }) => {
      const asked = this.asked.get(id);
      if (!asked) return;
      this.asked.delete(id);
      clearTimeout(asked.timer);
      asked.resolve(snapshot);
    });
    // An error is followed by 'exit'.
    worker.on('error', () => undefined);
    worker.on('exit', () => this.drop(worker));
    return worker;
  }

  /** Forgets a thread (terminating it if it still runs); what it was asked is answered without it. */
  private drop(worker: Worker): void {
    if (this.worker === worker) {
      this.worker = undefined;
      void worker.terminate();
    }
    for (const [id, asked] of this.asked) {
      if (asked.worker !== worker) continue;
      this.asked.delete(id);
      clearTimeout(asked.timer);
      asked.resolve(quickSnapshot());
    }
  }
}

/**
 * Appends one line per type to `<type>-YYYY-MM-DD.log` (UTC day) every `intervalMs`, the first
 * at start (decisions §5). A sample still running when the next is due makes that one skip
 * rather than pile up. Its timer never keeps the process alive. With `keepDays` above 0, the
 * day-files of days more than that many days past are removed at the first sample and at the
 * first of each new day.
 */
export class StatsSampler {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  /** The UTC day pruned for last. */
  private prunedFor: string | undefined;

  constructor(
    readonly dir: string,
    readonly intervalMs: number,
    private readonly warn: (line: string) => void,
    private readonly take: () => Promise<Snapshot> = takeSnapshot,
    readonly keepDays = 0,
  ) {}

  start(): void {
    this.tick();
    this.timer = setInterval(() => this.tick(), this.intervalMs);
    this.timer.unref();
  }

  private tick(): void {
    if (this.running) return;
    this.running = this.sample()
      .catch((err: Error) => this.warn(`stats sample: ${err.message}`))
      .finally(() => {
        this.running = undefined;
      });
  }

  private async sample(): Promise<void> {
    const ts = Date.now();
    const samples = samplesOf(await this.take());
    await makeDir(this.dir);
    const day = utcDay(ts);
    for (const [type, fields] of Object.entries(samples) as Array<[StatType, object]>) {
      await appendFile(path.join(this.dir, statFileName(type, day)), `${JSON.stringify({ ts, ...fields })}\n`);
    }
    if (this.keepDays > 0 && this.prunedFor !== day) {
      await this.prune(ts).catch((err: Error) => this.warn(`could not remove old stats files: ${err.message}`));
      this.prunedFor = day;
    }
  }

  /**
   * Removes the day-files of days more than `keepDays` before `now`'s UTC day (with 3 on
   * 2026-01-09, those of 2026-01-05 and before); the names removed, in order. 0 removes none.
   */
  prune(now = Date.now()): Promise<string[]> {
    return removeOldDayFiles(this.dir, (name) => parseStatFile(name)?.date, this.keepDays, now);
  }

  /** Stops the timer and waits for a sample being written. */
  async stop(): Promise<void> {
    clearInterval(this.timer);
    this.timer = undefined;
    await this.running;
  }
}
