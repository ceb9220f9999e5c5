import { EventEmitter, once } from 'node:events';
import { createServer, type IncomingHttpHeaders, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';

/** One request a {@link PushTarget} received. */
export interface Received {
  path: string;
  headers: IncomingHttpHeaders;
  body: string;
  /** Requests in flight at the target when this one arrived (itself included). */
  inFlight: number;
}

/**
 * A real HTTP target for push tests (decisions §9.1). What it does is the path's first segment:
 * `/ok` echoes `{"got": <body>}`, `/text` answers plain text, `/fail` answers 500, `/busy` 429
 * with `Retry-After: <?after, default 1>`, `/reset` destroys the connection, `/hang` never
 * answers, `/hold` answers 200 only when {@link PushTarget.releaseHeld} is called,
 * `/slow?ms=N` answers after N ms, `/redirect?to=URL` answers 302 to URL. A `handler` set by the
 * test takes precedence for `/custom`.
 */
export class PushTarget extends EventEmitter {
  readonly received: Received[] = [];
  inFlight = 0;
  maxInFlight = 0;
  private readonly held: ServerResponse[] = [];
  private readonly sockets = new Set<Socket>();
  custom: ((received: Received, res: ServerResponse) => void) | null = null;

  private constructor(
    private readonly server: Server,
    readonly url: string,
  ) {
    super();
  }

  static async start(): Promise<PushTarget> {
    const server = createServer();
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const target = new PushTarget(server, `http://127.0.0.1:${(server.address() as AddressInfo).port}`);
    server.on('connection', (socket) => {
      target.sockets.add(socket);
      socket.on('close', () => target.sockets.delete(socket));
    });
    server.on('request', (req, res) => {
      const chunks: Buffer[] = [];
      target.inFlight += 1;
      target.maxInFlight = Math.max(target.maxInFlight, target.inFlight);
      const inFlight = target.inFlight;
      let counted = true;
      const done = (): void => {
        if (counted) target.inFlight -= 1;
        counted = false;
      };
      res.on('close', done);
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const url = new URL(req.url ?? '/', target.url);
        const received: Received = { path: url.pathname, headers: req.headers, body: Buffer.concat(chunks).toString('utf8'), inFlight };
        target.received.push(received);
        target.emit('request', received);
        target.answer(url, received, res);
      });
    });
    return target;
  }

  private answer(url: URL, received: Received, res: ServerResponse): void {
    switch (url.pathname.split('/')[1]) {
      case 'ok':
        res.setHeader('content-type', 'application/json');
        res.end(JSON.stringify({ got: JSON.parse(received.body) as unknown }));
        return;
      case 'text':
        res.end('done, thanks');
        return;
      case 'fail':
        res.statusCode = 500;
        res.end('it broke');
        return;
      case 'busy':
        res.statusCode = 429;
        res.setHeader('retry-after', url.searchParams.get('after') ?? '1');
        res.end('slow down');
        return;
      case 'reset':
        res.socket?.destroy();
        return;
      case 'hang':
        return;
      case 'hold':
        this.held.push(res);
        this.emit('held', received);
        return;
      case 'slow':
        setTimeout(() => res.end('{"slow":true}'), Number(url.searchParams.get('ms') ?? '100'));
        return;
      case 'redirect':
        res.statusCode = 302;
        res.setHeader('location', url.searchParams.get('to') ?? 'http://example.invalid/');
        res.end();
        return;
      case 'custom':
        if (this.custom !== null) {
          this.custom(received, res);
          return;
        }
        res.end('{}');
        return;
      default:
        res.statusCode = 404;
        res.end();
    }
  }

  /** Answers every held request 200 `{"held":true}`; later ones are held again. */
  releaseHeld(): void {
    for (const res of this.held.splice(0)) res.end('{"held":true}');
  }

  /** Resolves when `count` requests in all have been received. */
  async receivedCount(count: number): Promise<void> {
    while (this.received.length < count) await once(this, 'request');
  }

  /** Resolves when `count` requests are held. */
  async heldCount(count: number): Promise<void> {
    while (this.held.length < count) await once(this, 'held');
  }

  get heldNow(): number {
    return this.held.length;
  }

  async stop(): Promise<void> {
    for (const socket of this.sockets) socket.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}
