import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';

/**
 * An answer given before the request's body was read (the wall, a 413, a refusal) ends the
 * connection (`connection: close`): to keep it open, Node would read and drop the rest of the body
 * first, however long the client makes it. Only a request that declares a body is concerned, and
 * whether its body was read depends on the route alone (a handler reads it once access is granted),
 * so the wall stays one response to every probe.
 */
export function closeUnlessBodyRead(res: ServerResponse): void {
  const req = res.req;
  if (req.readableEnded || !res.shouldKeepAlive) return;
  const length = req.headers['content-length'];
  if ((length !== undefined && length !== '0') || req.headers['transfer-encoding'] !== undefined) {
    res.shouldKeepAlive = false;
    lingerAtClose(req.socket as Socket & Lingering);
  }
}

/**
 * How long a connection closed under a body still on its way goes on reading (and dropping) it
 * after the answer: closed at once, with bytes unread, it would be reset, and a client still
 * sending could lose the answer before reading it (the "lingering close" of Apache and nginx).
 */
const LINGER_MS = 2000;

interface Lingering {
  destroySoon(): void;
}

/** Node ends a connection after its last answer with `destroySoon`; this one lingers first. */
function lingerAtClose(socket: Socket & Lingering): void {
  socket.destroySoon = function (this: Socket) {
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
