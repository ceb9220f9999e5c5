import { createElement as h, useEffect, useRef, useState, type ReactElement } from 'react';
import { Box, Text, useApp, useInput, useStdout } from 'ink';
import type { SvcqClient } from '../../client/client.js';
import { queuePath, type QueueDetail, type QueueEntry } from '../../operators/answers.js';
import { fetchTop } from './fetch.js';
import { advance, initialState, keyOf, move, type Fetched, type TopState } from './model.js';
import { screenLines } from './screen.js';

/** Queues PgUp and PgDn move the selection by. */
const PAGE = 10;

export interface TopProps {
  client: SvcqClient;
  /** The server URL, shown in the header. */
  url: string;
  intervalMs: number;
  /** Whether keys can be read (stdin is a terminal); without them only a signal ends the view. */
  keys: boolean;
  /** A refresh made just before (without detail): shown at once, the next one `intervalMs` later. */
  first?: Fetched;
}

/**
 * The live view: refreshes every `intervalMs` (the next refresh starts when the last one has
 * answered, so a slow server is never asked twice at once), moves the selection with the arrow
 * keys, PgUp/PgDn (ten queues) and Home/End (fetching the newly selected queue at once), and quits
 * on `q` or Ctrl-C.
 */
export function Top({ client, url, intervalMs, keys, first }: TopProps): ReactElement {
  const { exit } = useApp();
  const { stdout } = useStdout();
  const [state, setState] = useState<TopState>(() => (first ? advance(initialState(), first) : initialState()));
  // With a refresh made before the view, the view's own first one waits its interval.
  const startedWith = useRef(first);
  const selected = useRef<string | null>(null);
  selected.current = state.selected;
  const shown = useRef<readonly QueueEntry[]>([]);
  shown.current = state.fetched?.list.queues ?? [];
  const [size, setSize] = useState({ columns: stdout.columns || 80, rows: stdout.rows || 24 });

  useEffect(() => {
    const onResize = (): void => setSize({ columns: stdout.columns || 80, rows: stdout.rows || 24 });
    stdout.on('resize', onResize);
    return () => {
      stdout.off('resize', onResize);
    };
  }, [stdout]);

  useEffect(() => {
    let stopped = false;
    let timer: NodeJS.Timeout | undefined;
    // A server that has stopped answering must not hold the process after q for the rest of the
    // request's timeout: the view's requests are abandoned when it ends.
    const abandon = new AbortController();
    const refresh = async (): Promise<void> => {
      try {
        const fetched = await fetchTop(client, selected.current, { shown: shown.current, signal: abandon.signal });
        if (!stopped) setState((s) => advance(s, fetched));
      } catch (err) {
        if (!stopped) setState((s) => ({ ...s, error: (err as Error).message }));
      }
      if (!stopped) timer = setTimeout(() => void refresh(), intervalMs);
    };
    if (startedWith.current) timer = setTimeout(() => void refresh(), intervalMs);
    else void refresh();
    return () => {
      stopped = true;
      clearTimeout(timer);
      abandon.abort();
    };
  }, [client, intervalMs]);

  // A new selection shows its own leases and oldest items now, not at the next refresh.
  useEffect(() => {
    const key = state.selected;
    const shown = state.fetched?.detail;
    if (key === null || (shown && keyOf(shown) === key)) return;
    let live = true;
    const abandon = new AbortController();
    const slash = key.indexOf('/');
    client
      .json<QueueDetail>('GET', queuePath(key.slice(0, slash), key.slice(slash + 1)), { shape: 'queueDetail', timeoutMs: 10_000, signal: abandon.signal })
      .then((detail) => {
        if (live) setState((s) => (s.selected === key && s.fetched ? { ...s, fetched: { ...s.fetched, detail } } : s));
      })
      .catch(() => undefined);
    return () => {
      live = false;
      abandon.abort();
    };
  }, [client, state.selected, state.fetched?.detail]);

  useInput(
    (input, key) => {
      if (input === 'q' || (key.ctrl && input === 'c')) exit();
      else if (key.upArrow) setState((s) => move(s, -1));
      else if (key.downArrow) setState((s) => move(s, 1));
      else if (key.pageUp) setState((s) => move(s, -PAGE));
      else if (key.pageDown) setState((s) => move(s, PAGE));
      else if (key.home) setState((s) => move(s, -Infinity));
      else if (key.end) setState((s) => move(s, Infinity));
    },
    { isActive: keys },
  );

  const lines = screenLines(state, size, { url, intervalMs, keys });
  return h(
    Box,
    { flexDirection: 'column', width: size.columns },
    lines.map((line, i) => h(Text, { key: i, wrap: 'truncate-end' }, line === '' ? ' ' : line)),
  );
}
