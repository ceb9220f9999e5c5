/**
 * How stores tell the waiting service that something a long poll may be waiting for has happened:
 * a queue has items to claim, or an item became terminal. A store announces a change only once it
 * is durable. In one process this is a map of listeners; with several nodes on one database it
 * will be LISTEN/NOTIFY, fanned out to the same listeners.
 */
export interface Notifier {
  /** Tells every listener of `topic`, each at most once per turn of the event loop. */
  notify(topic: string): void;
  /** Listens to `topic` until the returned function is called. */
  subscribe(topic: string, listener: () => void): () => void;
}

/** How a queue's claim topic begins (the queue's key follows). */
export const CLAIM_TOPIC_PREFIX = 'claim ';
/** How an item's topic begins (the queue's key, a space and the item's id follow). */
export const ITEM_TOPIC_PREFIX = 'item ';

/** The topic a queue's claimable items are announced on. */
export function claimTopic(queueKey: string): string {
  return `${CLAIM_TOPIC_PREFIX}${queueKey}`;
}

/** The topic an item's change to a terminal status (or its purge) is announced on. */
export function itemTopic(queueKey: string, id: string): string {
  return `${ITEM_TOPIC_PREFIX}${queueKey} ${id}`;
}

/** The notifier of one process. */
export class InProcessNotifier implements Notifier {
  private readonly listeners = new Map<string, Set<() => void>>();
  private readonly due = new Set<string>();

  notify(topic: string): void {
    if (!this.listeners.has(topic) || this.due.has(topic)) return;
    // Several changes in one turn (a group of posts) wake a listener once.
    if (this.due.size === 0) queueMicrotask(() => this.deliver());
    this.due.add(topic);
  }

  subscribe(topic: string, listener: () => void): () => void {
    let set = this.listeners.get(topic);
    if (!set) this.listeners.set(topic, (set = new Set()));
    set.add(listener);
    return () => {
      set.delete(listener);
      if (set.size === 0 && this.listeners.get(topic) === set) this.listeners.delete(topic);
    };
  }

  private deliver(): void {
    const topics = [...this.due];
    this.due.clear();
    for (const topic of topics) for (const listener of [...(this.listeners.get(topic) ?? [])]) listener();
  }
}
