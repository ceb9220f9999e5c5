import path from 'node:path';
import type { QueueConfig } from '../../../src/engine/config.js';
import { EmbeddedStore } from '../../../src/store/embedded-store.js';
import { ModelStore, newModelDisk } from '../../../src/store/model-store.js';
import type { Store } from '../../../src/store/store.js';
import { openTools, type Tools } from '../../../src/tools/index.js';
import { LongPolls } from '../../../src/waiting/long-poll.js';
import { InProcessNotifier } from '../../../src/waiting/notifier.js';
import { cleanupTemp, tempDir } from '../../support/server.js';

/** A fake time far from the real one: only `advance` moves it. */
export const START = 1_700_000_000_000;

export class FakeClock {
  constructor(private t = START) {}
  readonly now = (): number => this.t;
  advance(ms: number): void {
    this.t += ms;
  }
}

/** A store under test, its clock, and a restart on the same data. */
export interface StoreUnderTest {
  /** The open store; a different object after `reopen`. */
  readonly store: Store;
  readonly clock: FakeClock;
  /** Claims and fetches that wait (decisions §3.3 `wait`, §3.6 `?wait=N`): the long polls above the store, woken by its announcements. */
  readonly waits: LongPolls;
  /** Closes the store and opens a new one on the same data (journal directory, model disk); `whileClosed` runs in between. */
  reopen(whileClosed?: () => void): Promise<void>;
  /** Closes it and removes what it kept. */
  dispose(): Promise<void>;
}

export interface FactoryOptions {
  /** A queue's current rules, for a store that applies time-driven changes outside any request (the embedded store at open). */
  configFor: (key: string) => QueueConfig | undefined;
  clock?: FakeClock;
}

export type StoreFactory = (options: FactoryOptions) => Promise<StoreUnderTest>;

/** The embedded store on a fresh temp directory, with the real task history and payload archive beside it, and the fake clock as its `now`. */
export const embedded: StoreFactory = async (options) => {
  const clock = options.clock ?? new FakeClock();
  const home = tempDir('svcq-conformance-');
  const warnings: string[] = [];
  let tools: Tools | undefined;
  let store: EmbeddedStore;
  let waits: LongPolls;
  const open = async (): Promise<void> => {
    tools = await openTools({ home, statsInterval: 3_600_000, warn: (l) => warnings.push(l) });
    const notifier = new InProcessNotifier();
    store = new EmbeddedStore({ dir: path.join(home, 'store'), hooks: tools.hooks, configFor: options.configFor, warn: (l) => warnings.push(l), now: clock.now, notifier });
    await store.open();
    await tools.tasks.start(store);
    waits = new LongPolls(store, notifier);
  };
  const close = async (): Promise<void> => {
    await store.close();
    await tools?.close();
    tools = undefined;
  };
  await open();
  return {
    get store() {
      return store;
    },
    get waits() {
      return waits;
    },
    clock,
    async reopen(whileClosed) {
      await close();
      whileClosed?.();
      await open();
    },
    async dispose() {
      await close().catch(() => undefined);
      cleanupTemp(home);
    },
  };
};

/** The reference model, with a disk that outlives each ModelStore. */
export const model: StoreFactory = async (options) => {
  const clock = options.clock ?? new FakeClock();
  const disk = newModelDisk();
  let notifier = new InProcessNotifier();
  let store = new ModelStore(disk, { now: clock.now, notifier });
  let waits = new LongPolls(store, notifier);
  await store.open();
  return {
    get store() {
      return store;
    },
    get waits() {
      return waits;
    },
    clock,
    async reopen(whileClosed) {
      await store.close();
      whileClosed?.();
      notifier = new InProcessNotifier();
      store = new ModelStore(disk, { now: clock.now, notifier });
      waits = new LongPolls(store, notifier);
      await store.open();
    },
    async dispose() {
      await store.close();
    },
  };
};
