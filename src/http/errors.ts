import type { ServerResponse } from 'node:http';
import { DefinitionError } from '../definitions/registry.js';
import { StoreUnavailable } from '../store/store.js';
import { closeUnlessBodyRead } from './unread-body.js';
import { sendWall } from './wall.js';
import { stderrLine } from '../server-output.js';

/**
 * What kind of {@link HttpError} it is: `wall` (a denied or unknown request), `rejected` (fields
 * refused), `no-such-item`, `bad-request` (management and tools), `unavailable` (503: the store
 * cannot take changes now), or `http` for any other status.
 */
export type HttpErrorCode = 'wall' | 'rejected' | 'no-such-item' | 'bad-request' | 'unavailable' | 'http';

/** Errors that know their HTTP answer. Every layer throws these; {@link sendError} is the one place that answers them. */
export class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly body: unknown,
    readonly code: HttpErrorCode = status === 503 ? 'unavailable' : 'http',
  ) {
    super(typeof body === 'object' && body !== null && 'error' in body ? String((body as { error: unknown }).error) : `HTTP ${status}`);
  }
}

export interface FieldError {
  path: string;
  message: string;
}

/** The wall: a denied or unknown request. */
export class NotFound extends HttpError {
  constructor() {
    super(404, null, 'wall');
  }
}

/** 400 `{ ok: false, errors }` for queue endpoints (decisions §3.5). */
export class Rejected extends HttpError {
  constructor(errors: FieldError[], status = 400) {
    super(status, { ok: false, errors }, 'rejected');
  }
}

export class NoSuchItem extends HttpError {
  constructor() {
    super(404, { ok: false, error: 'no such item' }, 'no-such-item');
  }
}

/** 400 `{ error }` for management and tools endpoints. */
export class BadRequest extends HttpError {
  constructor(message: string) {
    super(400, { error: message }, 'bad-request');
  }
}

export function sendJson(res: ServerResponse, status: number, body: unknown): void {
  sendRawJson(res, status, JSON.stringify(body));
}

/** Answers with JSON text that is already serialised (the hot queue endpoints build theirs by hand), with any `headers` besides. */
export function sendRawJson(res: ServerResponse, status: number, json: string, headers?: Record<string, string>): void {
  closeUnlessBodyRead(res);
  res.writeHead(status, {
    'content-type': 'application/json; charset=utf-8',
    'content-length': Buffer.byteLength(json),
    'access-control-allow-origin': '*',
    ...headers,
  });
  res.end(json);
}

/** The client went away before its request was whole: nobody is left to answer, and nothing failed here. */
export class ClientGone extends Error {
  constructor() {
    super('the client closed the connection before its request was whole');
  }
}

/** Maps any thrown value to its response. Unknown errors are a 500 with one line on stderr and no stack in the reply. */
export function sendError(res: ServerResponse, err: unknown): void {
  if (err instanceof NotFound) return sendWall(res);
  if (res.headersSent || err instanceof ClientGone) {
    res.destroy();
    return;
  }
  if (err instanceof HttpError) return sendJson(res, err.status, err.body);
  if (err instanceof DefinitionError) return sendJson(res, 400, { error: err.message });
  if (err instanceof StoreUnavailable) return sendJson(res, 503, { error: err.message });
  // A path parameter that is not valid percent-encoding (`%ZZ`, a cut UTF-8 sequence): the router
  // could not decode it. Only a request past the wall gets here.
  if (err instanceof URIError) return sendJson(res, 400, { error: 'the request path is not valid percent-encoded UTF-8' });
  const status = (err as { status?: unknown; type?: unknown }).status;
  if (status === 413 || (err as { type?: unknown }).type === 'entity.too.large') {
    return sendJson(res, 413, { error: 'request body too large' });
  }
  // body-parser marks the client's own mistakes (a bad content encoding or charset, a body cut
  // short) as exposable 4xx errors: those are the client's to fix, not a server failure.
  const exposed = err as { expose?: unknown; type?: unknown; message?: unknown };
  if (typeof status === 'number' && status >= 400 && status < 500 && exposed.expose === true && exposed.type !== undefined) {
    return sendJson(res, status, { error: `request body could not be read: ${String(exposed.message)}` });
  }
  stderrLine(`svcq: internal error: ${(err as Error)?.stack ?? String(err)}`);
  sendJson(res, 500, { error: 'internal server error' });
}
