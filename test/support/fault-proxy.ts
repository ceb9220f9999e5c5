import net from 'node:net';

/**
 * A TCP proxy in front of a server that loses answers on cue, as a network or a dying server
 * does. Requests whose first line matches `match` (e.g. `POST /q/batch`) are counted; while
 * `dropAnswers` is above 0, each such request goes through to the server, and when the server's
 * answer starts coming back the client's connection is reset instead (the server has acted, the
 * client never hears). Matching requests past the first `passOnly` are never forwarded: their
 * connection is reset (the server has gone away, and never saw them).
 */
export interface FaultProxy {
  url: string;
  /** Answers to lose from now on (counted down). */
  dropAnswers: number;
  /** Matching requests forwarded at most; later ones get a reset and never reach the server. */
  passOnly: number;
  /** Requests matching `match` seen so far. */
  matched: number;
  /** The distinct `Idempotency-Key` values of the matching requests seen so far (a retry repeats its key). */
  keys: Set<string>;
  /** While true, matching requests are held: never forwarded, never answered (a server that hangs). */
  hold: boolean;
  /** When true, the proxy closes as it loses an answer: the server is gone, and later connections are refused. */
  goneAfterDrop: boolean;
  close(): void;
}

export async function faultProxy(serverUrl: string, match: RegExp): Promise<FaultProxy> {
  const target = new URL(serverUrl);
  const sockets = new Set<net.Socket>();
  const state: FaultProxy = {
    url: '',
    dropAnswers: 0,
    passOnly: Infinity,
    matched: 0,
    keys: new Set(),
    hold: false,
    goneAfterDrop: false,
    close: () => {
      for (const s of sockets) s.destroy();
      proxy.close();
    },
  };
  const proxy = net.createServer((client) => {
    const upstream = net.connect(Number(target.port), target.hostname);
    let dropNext = false;
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on('error', () => undefined).on('close', () => (sockets.delete(s), client.destroy(), upstream.destroy()));
    }
    client.on('data', (chunk: Buffer) => {
      const head = chunk.subarray(0, Math.min(chunk.length, 4096)).toString('latin1');
      const line = head.split('\r\n')[0]!;
      if (match.test(line)) {
        state.matched++;
        const key = /\r\nidempotency-key: *([^\r]*)/i.exec(head);
        if (key) state.keys.add(key[1]!);
        if (state.hold) return;
        if (state.matched > state.passOnly) {
          client.resetAndDestroy();
          upstream.destroy();
          return;
        }
        if (state.dropAnswers > 0) {
          state.dropAnswers--;
          dropNext = true;
        }
      }
      upstream.write(chunk);
    });
    upstream.on('data', (chunk: Buffer) => {
      if (dropNext) {
        dropNext = false;
        client.resetAndDestroy();
        upstream.destroy();
        if (state.goneAfterDrop) state.close();
        return;
      }
      client.write(chunk);
    });
  });
  await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
  state.url = `http://127.0.0.1:${(proxy.address() as net.AddressInfo).port}`;
  return state;
}
