// IN PROGRESS: replaced by the real embedded store shortly.
import type { QueueConfig } from '../engine/config.js';
import type { Store, StoreHooks } from './store.js';

export interface EmbeddedStoreOptions {
  dir: string;
  hooks: StoreHooks;
  configFor: (key: string) => QueueConfig | undefined;
  warn: (line: string) => void;
}

const todo = (): Promise<never> => Promise.reject(new Error('store not ready'));

export class EmbeddedStore implements Store {
  constructor(readonly options: EmbeddedStoreOptions) {}
  async open(): Promise<void> {}
  async close(): Promise<void> {}
  post = todo;
  claim = todo;
  get = todo;
  progress = todo;
  result = todo;
  error = todo;
  cancel = todo;
  counts = todo;
}
