import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';

/**
 * A body no larger than this that an answer leaves unread is read and dropped by Node, and the
 * connection stays open; past it (or of unknown length) the answer ends the connection.
 */
const DROP_AND_KEEP = 64 * 1024;

/**
 * An answer given before a large request body was read (the wall, a 413, a refusal) ends the
 * connection (`connection: close`): to keep it open, Node would read and drop the rest of the body
 * first, however long the client makes it. A small body of declared length is read and dropped as
 * before. Whether a body was read depends on the route alone (a handler reads it once access is
 * granted), and its size on the request alone, so the wall stays one response to every probe.
 * A connection that ends after this answer anyway (the client sent `connection: close`, spoke
 * HTTP/1.0, or the server is stopping) lingers all the same: closed at once under a body still
 * on its way, it would be reset, and the client could lose the answer.
 */
export function closeUnlessBodyRead(res: ServerResponse): void {
  const req = res.req;
  if (req.readableEnded || !hasBody(req)) return;
  const length = req.headers['content-length'];
  // Node reads and drops a small body only to serve the connection's next request: on a
  // connection that ends anyway it closes at once, and the small body lingers like a large one.
  if (res.shouldKeepAlive && length !== undefined && Number(length) <= DROP_AND_KEEP) return;
  endAfterAnswer(res);
}

/**
 * The answer being written is the connection's last (`connection: close`). A body still on its way
 * is read and dropped for a while first (see {@link LINGER_MS}); requests behind it are not served.
 */
export function endAfterAnswer(res: ServerResponse): void {
  res.shouldKeepAlive = false;
  if (!res.req.readableEnded && hasBody(res.req)) lingerAtClose(res.req.socket as Socket & Lingering);
}

function hasBody(req: IncomingMessage): boolean {
  const length = req.headers['content-length'];
  return (length !== undefined && length !== '0') || req.headers['transfer-encoding'] !== undefined;
}

/** Whether the connection's last answer is written and it only lingers: a request read from it now is not served. */
export function lingering(socket: Socket): boolean {
  return (socket as Socket & Lingering)[LINGERING] === true;
}

/** The answer under way is the connection's last: a request read from it after this is not served. */
export function lastExchange(socket: Socket): void {
  (socket as Socket & Lingering)[LINGERING] = true;
}

/**
 * How long a connection closed under a body still on its way goes on reading (and dropping) it
 * after the answer: closed at once, with bytes unread, it would be reset, and a client still
 * sending could lose the answer before reading it (the "lingering close" of Apache and nginx).
 */
const LINGER_MS = 2000;
const LINGERING = Symbol('svcq.lingering');

interface Lingering {
  destroySoon(): void;
  [LINGERING]?: boolean;
}

/** Node ends a connection after its last answer with `destroySoon`; this one lingers first. */
function lingerAtClose(socket: Socket & Lingering): void {
  // From now on the connection serves no new request: what is parsed after this answer was sent after it.
  socket[LINGERING] = true;
  socket.destroySoon = function (this: Socket & Lingering) {
    // Our side is done (FIN after the answer); what still comes is read by the request, which
    // Node dumps, until the client ends or the time is up.
    this.end();
    const timer = setTimeout(() => this.destroy(), LINGER_MS);
    timer.unref();
    this.once('close', () => clearTimeout(timer));
    this.once('end', () => this.destroy());
  };
}

const CONTINUE = Symbol('svcq.continue');
type HeldRequest = IncomingMessage & { [CONTINUE]?: ServerResponse };

/**
 * Holds back the `100 Continue` a request asked for (`expect: 100-continue`) until its body is
 * wanted (see {@link wantBody}): a request answered without its body (the wall, a declared size
 * past the limit) is never told to send it.
 */
export function holdContinue(req: IncomingMessage, res: ServerResponse): void {
  (req as HeldRequest)[CONTINUE] = res;
}

/** Tells a client that waits for `100 Continue` to send its body. */
export function wantBody(req: IncomingMessage): void {
  const held = req as HeldRequest;
  const res = held[CONTINUE];
  if (res === undefined) return;
  held[CONTINUE] = undefined;
  if (!res.headersSent) res.writeContinue();
}
