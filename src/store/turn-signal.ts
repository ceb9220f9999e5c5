/**
 * Listeners told at most once per turn of the event loop, however many times the signal is raised
 * in it: a store that makes a thousand changes in one write wakes its readers once.
 */
export class TurnSignal {
  private readonly listeners: Array<() => void> = [];
  private raised = false;

  listen(listener: () => void): void {
    this.listeners.push(listener);
  }

  /** Calls every listener in a microtask, unless one is already on its way. */
  raise(): void {
    if (this.raised) return;
    this.raised = true;
    queueMicrotask(() => {
      this.raised = false;
      for (const listener of this.listeners) listener();
    });
  }
}
