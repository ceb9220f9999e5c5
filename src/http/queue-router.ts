import { isUtf8 } from 'node:buffer';
import type { IncomingMessage, ServerResponse } from 'node:http';
import FindMyWay from 'find-my-way';
import cors from 'cors';
import { Ajv2020 } from 'ajv/dist/2020.js';
import type { ErrorObject, ValidateFunction } from 'ajv';
import type { Operation } from '../definitions/schemas.js';
import type { QueueRuntime } from '../definitions/registry.js';
import { allows, type AccessPolicy } from '../engine/config.js';
import type { PushAllowList } from '../push/allow-list.js';
import { postOptions, releaseDelayOf, retryWishOf, sourceJson, type PostOptions, type RetryWish } from '../engine/rules.js';
import { EmbeddedStore } from '../store/embedded-store.js';
import { QueueWithdrawn, type ClaimHolds } from '../waiting/long-poll.js';
import { StoreUnavailable, type Claimed, type PostInput, type StatusRecord, type SubmitOutcome } from '../store/store.js';
import { bearerToken, requestHost } from './auth.js';
import type { ServerContext } from './context.js';
import { ClientGone, HttpError, NoSuchItem, NotFound, Rejected, sendError, sendRawJson, type FieldError } from './errors.js';
import { closeUnlessBodyRead, wantBody } from './unread-body.js';
import { arrayElements, jsonString, nestedDeeperThan, objectMembers, ownText, pointerPart, unsureForSchema } from '../json-text.js';
import { CLAIM_REQUEST_SCHEMA, IDEMPOTENCY_KEY_RULE, isIdempotencyKey, MAX_BATCH, MAX_BATCH_BYTES, type ClaimRequest, type DoneEntry } from '../protocol.js';

/**
 * The queue domain: producer and worker endpoints (interface §4.1–§4.3, decisions §3), routed by
 * the Host header. These are the hot paths, so they run on `node:http` with find-my-way instead of
 * through Express (whose own per-request cost is several times that of the work done here); the
 * wall and the error mapping are the same functions Express uses (`errors.ts`, `wall.ts`).
 */

const ID = /^[0-9a-f]{16}$/;

/** The access of a queue that does not exist: decided like any other, allowing nobody. */
const NOBODY: AccessPolicy = {};

/**
 * How deep a claim body may nest. Criteria name top-level fields and compare values, so a few
 * levels are plenty; a body nested thousands deep would exhaust the stack of whatever walks it.
 */
const CLAIM_DEPTH = 64;
/** How deep an item may nest to be checked against a queue's schema (items of a queue without one are stored as text, at any depth). */
const SCHEMA_DEPTH = 512;

/**
 * The claim request's validator, compiled at the first claim rather than at every start (where
 * it took 30 ms). validateSchema: the schema is ours and fixed; checking it against the JSON
 * Schema meta-schema would compile that first, which took most of that time.
 */
let claimValidator: ValidateFunction<ClaimRequest> | undefined;
const claimRequestValidator = (): ValidateFunction<ClaimRequest> => (claimValidator ??= new Ajv2020({ allErrors: true, strict: false, validateSchema: false }).compile<ClaimRequest>(CLAIM_REQUEST_SCHEMA));

const preflight = cors({
  origin: '*',
  methods: ['GET', 'POST', 'OPTIONS'],
  allowedHeaders: ['authorization', 'content-type', 'idempotency-key', 'range'],
  maxAge: 600,
});

/**
 * A queue endpoint, called once access is granted; `user` is the caller's user name, or "public".
 * `current` decides again, for a request that waits: the queue as it is now, or undefined once
 * its definition is gone or the caller may no longer do this (decisions §2.4).
 */
type QueueHandler = (req: IncomingMessage, res: ServerResponse, queue: QueueRuntime, params: Record<string, string | undefined>, query: Record<string, string>, user: string, current: () => QueueRuntime | undefined) => Promise<void>;

export type RequestListener = (req: IncomingMessage, res: ServerResponse) => void;

export function createQueueRouter(ctx: ServerContext): RequestListener {
  const router = FindMyWay({
    ignoreTrailingSlash: false,
    caseSensitive: true,
    // find-my-way sends a parameter longer than 100 characters to the default route (the wall):
    // an item id that long is "no such item" for a caller with access (decisions §3.7). Node
    // refuses a request line past 16 KiB before this.
    maxParamLength: 16 * 1024,
    defaultRoute: (_req, res) => sendError(res, new NotFound()),
    onBadUrl: (_path, _req, res) => sendError(res, new NotFound()),
  });

  /** Resolves host, queue, token and access; anything short of allowed is the wall. */
  const route = (method: 'GET' | 'POST', path: string, op: Operation, handler: QueueHandler): void => {
    router.on(method, path, (req, res, params, _store, query) => {
      // The caller is looked up and the access decided whether the queue exists or not, in the
      // same steps: a missing queue costs what a present one does.
      const host = requestHost(req);
      const token = bearerToken(req);
      const key = typeof token === 'string' ? ctx.registry.tokenKey(token) : undefined;
      // null: no token; undefined: a token no user of the host holds, or a malformed header.
      const found = key === undefined ? undefined : ctx.registry.userForKey(host, key);
      const user = token === undefined ? null : found;
      const queue = ctx.registry.queue(host, params.queue ?? '');
      const allowed = allows(queue?.access ?? NOBODY, op, user ?? null);
      if (!queue || user === undefined || !allowed) return sendError(res, new NotFound());
      // `current`, unnamed: see readBody.
      handler(req, res, queue, params, query, user ?? 'public', (): QueueRuntime | undefined => {
        const now = ctx.registry.queue(queue.host, queue.name);
        if (!now || (key !== undefined && ctx.registry.userForKey(now.host, key) !== user)) return undefined;
        return allows(now.access, op, user) ? now : undefined;
      }).catch((err: unknown) => sendError(res, queueError(err)));
    });
  };

  route('POST', '/:queue', 'post', async (req, res, queue, _params, query, postedBy) => {
    const body = await readBody(req, ctx.maxBody);
    const options = postOptionsOf(query, ctx.pushAllow);
    const item = parseObject(body, 'the item');
    if (queue.validator) validateItem(queue.validator, item, body);
    const key = idempotencyKeyOf(req);
    const out = await ctx.store.post(queue, options === undefined ? { body, postedBy, idempotencyKey: key } : { body, postedBy, idempotencyKey: key, options });
    sendRawJson(res, 200, `{"ok":true,"id":"${out.id}","status":"${out.status}"}`);
  });

  route('GET', '/:queue/items/:id', 'fetch', async (req, res, queue, params, query, _user, current) => {
    const id = params.id ?? '';
    const waitMs = waitParam(query.wait);
    if (!ID.test(id)) throw new NoSuchItem();
    const record = await ctx.waits.get(queue, id, waitMs, waitMs > 0 ? closeSignal(req, res, ctx) : undefined, current);
    if (!record) throw new NoSuchItem();
    sendRawJson(res, 200, statusJson(record));
  });

  route('POST', '/:queue/claim', 'work', async (req, res, queue, _params, _query, _user, current) => {
    // A wait counts from here: the first look and the hand-ins take from it (decisions §3.3).
    const arrived = Date.now();
    const body = await readBody(req, ctx.maxBody);
    if (nestedDeeperThan(body, CLAIM_DEPTH)) throw new Rejected([{ path: '/criteria', message: `the claim request nests deeper than ${CLAIM_DEPTH} levels` }]);
    const input = body.trim() === '' ? {} : parseObject(body, 'the claim request');
    // A malformed max or done is refused here, before anything of the request is applied (decisions §3.8).
    const validateClaim = claimRequestValidator();
    if (!validateClaim(input)) throw new Rejected(ajvErrors(validateClaim.errors ?? []));
    const { criteria, wait, max, done } = input;
    // A name every store can keep as it was sent (PostgreSQL's text holds no U+0000, and turns a
    // lone surrogate into U+FFFD): leases and task events name the worker exactly.
    if (input.worker !== undefined && !storableText(input.worker)) throw new Rejected([{ path: '/worker', message: 'must not hold the character U+0000 or a lone UTF-16 surrogate (\\ud800-\\udfff without its pair)' }]);
    const worker = input.worker ?? 'anonymous';
    // Hand-ins first, in order, exactly as the result and error endpoints apply them; the claim
    // then runs at once, and everything is awaited together: one durable write carries them all.
    const handIns = done === undefined ? undefined : handIn(queue, done, doneRecordTexts(body));
    // With payloads archived, each hand-in stages its payload before it is applied, one after the
    // other: the claim waits for them, or it would run before them.
    if (handIns !== undefined && queue.config.archivePayloads) await handIns;
    // The hand-ins and the first look share one durable write, and both are awaited before any
    // wait: hand-ins that could not be made durable are a 503 now, never a rejection left unheard.
    // What held this request's looks back (decisions §8.5), over its first look and its wait.
    const holds: ClaimHolds = {};
    const [looked, handedIn] = await Promise.allSettled([ctx.waits.claimMany(queue, { worker, criteria, waitMs: 0, max, holds }), handIns]);
    if (handedIn.status === 'rejected') throw handedIn.reason;
    const doneTexts = handedIn.value;
    // Hand-ins made durable and a claim that was not (a store may commit them apart): the answer
    // says what became of the hand-ins, and that nothing was claimed. A 503 would have the worker
    // send them again, and an error applied twice uses up another attempt.
    if (looked.status === 'rejected' && !(doneTexts !== undefined && looked.reason instanceof StoreUnavailable)) throw looked.reason;
    let claimed = looked.status === 'fulfilled' ? looked.value : [];
    const lookFailed = looked.status === 'rejected';
    // Counted once per request, as soon as a look is held back (a held wait shows at once).
    const counted = holds.first !== undefined;
    if (counted) ctx.operators.metrics.held(queue.key, holds.first!);
    // An item at hand is claimed without waiting; only a claim that has to wait gets the hang-up
    // signal, which costs listeners on the request, the socket and the server.
    if (claimed.length === 0 && wait && !lookFailed) {
      // A wait follows the queue's definition as it changes, and ends with the wall once the
      // caller may no longer claim: unless hand-ins were applied, which the answer then reports.
      claimed = await ctx.waits.claimMany(queue, { worker, criteria, waitMs: wait * 1000, since: arrived, max, signal: closeSignal(req, res, ctx), current, holds }).catch((err: unknown) => {
        if (err instanceof QueueWithdrawn && doneTexts !== undefined) return [];
        throw err;
      });
    }
    if (!counted && holds.first !== undefined) ctx.operators.metrics.held(queue.key, holds.first);
    // The caller hung up while the store claimed for it (its first look, or a wait it gave up
    // while a look was under way): nobody can be told of these leases, so the items go back in
    // their place at once, their attempt not counted (decisions §3.3, §8.2 release), rather than
    // wait out a lease nobody holds.
    if (claimed.length > 0 && (req.socket.destroyed || res.destroyed)) {
      await Promise.allSettled(claimed.map((c) => ctx.store.release(queue, c.id, 0)));
      return;
    }
    const doneJson = doneTexts === undefined ? '' : `,"done":[${doneTexts.join(',')}]`;
    // An empty answer that the rate limit held back says when a claim can next succeed.
    const later = claimed.length === 0 ? retryAfter(holds) : undefined;
    if (max !== undefined) return sendRawJson(res, 200, `{"ok":true,"items":[${claimed.map(claimedJson).join(',')}]${doneJson}}`, later);
    const first = claimed[0];
    if (!first) return sendRawJson(res, 200, `{"ok":true,"empty":true${doneJson}}`, later);
    sendRawJson(res, 200, `{"ok":true,${claimedJson(first).slice(1, -1)}${doneJson}}`);
  });

  /**
   * Applies a claim's hand-ins in order (each as its endpoint would) and resolves to their answers
   * as JSON texts once all are durable. Every submission is started before any is awaited, so that
   * they and the claim after them share one durable write (on PostgreSQL, one transaction when
   * they arrive together).
   */
  const handIn = async (queue: QueueRuntime, done: DoneEntry[], texts: ReadonlyArray<string | undefined>): Promise<string[]> => {
    // Each record is stored as it was sent, as the result and error endpoints store their bodies.
    const record = (entry: DoneEntry, n: number): string => texts[n] ?? JSON.stringify(entry.result ?? entry.error);
    const apply = (entry: DoneEntry, n: number): Promise<SubmitOutcome | null> => {
      if (!ID.test(entry.id)) return Promise.resolve(null);
      return entry.result !== undefined ? ctx.store.result(queue, entry.id, record(entry, n)) : ctx.store.error(queue, entry.id, record(entry, n), wishOf(entry));
    };
    let settled: Array<SubmitOutcome | null>;
    if (ctx.store instanceof EmbeddedStore) {
      // The embedded store applies them the same way, in one commit (their payloads staged first, all or none).
      const entries: Array<{ id: string; kind: 'result' | 'error'; body: string; wish?: RetryWish }> = [];
      done.forEach((entry, n) => {
        if (ID.test(entry.id)) entries.push({ id: entry.id, kind: entry.result !== undefined ? 'result' : 'error', body: record(entry, n), wish: wishOf(entry) });
      });
      const outcomes = entries.length > 0 ? await ctx.store.submitMany(queue, entries) : [];
      let k = 0;
      settled = done.map((entry) => (ID.test(entry.id) ? outcomes[k++]! : null));
    } else {
      settled = await Promise.all(done.map(apply));
    }
    return settled.map((o, n) => {
      const id = jsonString(done[n]!.id);
      return o ? `{"id":${id},"ok":true,"accepted":${o.accepted},"status":"${o.status}"}` : `{"id":${id},"ok":false,"error":"no such item"}`;
    });
  };

  route('POST', '/:queue/batch', 'post', async (req, res, queue, _params, query, postedBy) => {
    const body = await readBody(req, MAX_BATCH_BYTES);
    // A batch's options apply to each of its items (decisions §8.1).
    const options = postOptionsOf(query, ctx.pushAllow);
    const key = idempotencyKeyOf(req);
    const { values, texts } = batchItems(body);
    const answers: string[] = new Array<string>(texts.length);
    const inputs: PostInput[] = [];
    const at: number[] = [];
    texts.forEach((text, n) => {
      try {
        // The body was parsed whole: each item's value is at hand, its text is what gets stored.
        const item = values[n];
        if (typeof item !== 'object' || item === null || Array.isArray(item)) throw new Rejected([{ path: '', message: 'the item must be a JSON object' }]);
        if (text.length > ctx.maxBody / 3 && Buffer.byteLength(text) > ctx.maxBody) throw new Rejected([{ path: '', message: `the item is larger than ${ctx.maxBody} bytes` }]);
        if (queue.validator) validateItem(queue.validator, item as Record<string, unknown>, text);
        inputs.push({ body: text, postedBy, idempotencyKey: key === undefined ? undefined : `${key}:${n}`, options });
        at.push(n);
      } catch (err) {
        if (!(err instanceof Rejected)) throw err;
        answers[n] = `{"ok":false,"errors":${JSON.stringify((err.body as { errors: FieldError[] }).errors)}}`;
      }
    });
    const created = inputs.length > 0 ? await ctx.store.postMany(queue, inputs) : [];
    created.forEach((out, i) => (answers[at[i]!] = `{"ok":true,"id":"${out.id}","status":"${out.status}"}`));
    sendRawJson(res, 200, `{"ok":true,"items":[${answers.join(',')}]}`);
  });

  const submission = (kind: 'progress' | 'result'): QueueHandler => async (req, res, queue, params) => {
    const body = await readBody(req, ctx.maxBody);
    parseObject(body, `the ${kind} record`);
    const id = params.id ?? '';
    if (!ID.test(id)) throw new NoSuchItem();
    answerSubmission(res, await ctx.store[kind](queue, id, body));
  };
  route('POST', '/:queue/items/:id/progress', 'work', submission('progress'));
  route('POST', '/:queue/items/:id/result', 'work', submission('result'));
  route('POST', '/:queue/items/:id/error', 'work', async (req, res, queue, params, query) => {
    const body = await readBody(req, ctx.maxBody);
    // The worker's wish for this failure (decisions §8.2): a bad one is refused with nothing applied.
    const { wish, errors } = retryWishOf(query);
    if (errors.length > 0) throw new Rejected(errors);
    parseObject(body, 'the error record');
    const id = params.id ?? '';
    if (!ID.test(id)) throw new NoSuchItem();
    answerSubmission(res, await ctx.store.error(queue, id, body, wish));
  });
  route('POST', '/:queue/items/:id/release', 'work', async (req, res, queue, params, query) => {
    await readBody(req, ctx.maxBody);
    const { delaySeconds, errors } = releaseDelayOf(query);
    if (errors.length > 0) throw new Rejected(errors);
    const id = params.id ?? '';
    if (!ID.test(id)) throw new NoSuchItem();
    answerSubmission(res, await ctx.store.release(queue, id, delaySeconds));
  });
  route('POST', '/:queue/items/:id/cancel', 'post', async (req, res, queue, params) => {
    await readBody(req, ctx.maxBody);
    const id = params.id ?? '';
    if (!ID.test(id)) throw new NoSuchItem();
    answerSubmission(res, await ctx.store.cancel(queue, id));
  });

  router.on('OPTIONS', '*', (req, res) => {
    // A preflight reads no body: one sent with it must not keep the connection reading (see closeUnlessBodyRead).
    closeUnlessBodyRead(res);
    preflight(req, res, () => sendError(res, new NotFound()));
  });

  return (req, res) => router.lookup(req, res);
}

/**
 * The exact text of each `done` entry's result or error in a claim body (valid JSON, already
 * checked against the claim schema), in order: what a hand-in stores, as the result and error
 * endpoints store a body as sent.
 */
function doneRecordTexts(body: string): Array<string | undefined> {
  const done = objectMembers(body, body.indexOf('{')).get('done');
  if (!done) return [];
  return arrayElements(body, done.start).map((entry) => {
    const members = objectMembers(body, entry.start);
    const span = members.get('result') ?? members.get('error');
    return span ? ownText(body, span) : undefined;
  });
}

/**
 * decisions §8.5: the `Retry-After` of an empty claim answer whose last look the rate limit held
 * back: whole seconds (rounded up) until one more lease may happen. Other holds (the pause,
 * maxActive, groupMaxActive) end at a moment nobody can name in advance (a resume, a lease's end,
 * which held claims hear of at once): their answers carry none.
 */
function retryAfter(holds: ClaimHolds): Record<string, string> | undefined {
  const last = holds.last;
  if (last?.reason !== 'rateLimit' || last.retryAt === undefined) return undefined;
  // Exposed to a page's script: a browser hides headers off the CORS safelist from it.
  return { 'retry-after': String(Math.max(0, Math.ceil((last.retryAt - Date.now()) / 1000))), 'access-control-expose-headers': 'Retry-After' };
}

/** A claimed item's fields as JSON text (the item spliced in as posted). */
function claimedJson(c: Claimed): string {
  return `{"id":"${c.id}","item":${c.item},"attempts":${c.attempts},"lease":{"worker":${jsonString(c.lease.worker)},"until":${c.lease.until}}}`;
}

/** A request's `Idempotency-Key`, if it has one; one the server does not take is a 400 (decisions §3.5). */
function idempotencyKeyOf(req: IncomingMessage): string | undefined {
  const key = req.headers['idempotency-key'];
  if (key === undefined) return undefined;
  if (!isIdempotencyKey(key)) throw new Rejected([{ path: 'Idempotency-Key', message: IDEMPOTENCY_KEY_RULE }]);
  return key;
}

/**
 * The items of a batch body, each as the exact JSON text the producer sent (decisions §3.8): the
 * body must be a JSON array of 1 to MAX_BATCH values. The array is parsed once to check it, then
 * cut at its top-level commas, so that each item keeps its own bytes as a single post would.
 */
export function batchItems(body: string): { values: unknown[]; texts: string[] } {
  let value: unknown;
  try {
    value = JSON.parse(body);
  } catch {
    throw new Rejected([{ path: '', message: 'the batch is not valid JSON' }]);
  }
  if (!Array.isArray(value)) throw new Rejected([{ path: '', message: 'the batch must be a JSON array of items' }]);
  if (value.length === 0 || value.length > MAX_BATCH) throw new Rejected([{ path: '', message: `the batch must hold 1 to ${MAX_BATCH} items (it holds ${value.length})` }]);
  return { values: value, texts: arrayElements(body, 0).map((span) => ownText(body, span)) };
}

/** On the queue domain an error body has the shape of the other queue answers: `{ ok: false, error }` (decisions §6); a wait whose queue was withdrawn gets the wall. */
function queueError(err: unknown): unknown {
  if (err instanceof QueueWithdrawn) return new NotFound();
  return err instanceof StoreUnavailable ? new HttpError(503, { ok: false, error: err.message }) : err;
}

function answerSubmission(res: ServerResponse, outcome: SubmitOutcome | null): void {
  if (!outcome) throw new NoSuchItem();
  sendRawJson(res, 200, `{"ok":true,"accepted":${outcome.accepted},"status":"${outcome.status}"}`);
}

/** The status record as JSON text; stored bodies are spliced in as they are. */
export function statusJson(r: StatusRecord): string {
  const group = r.group === null ? 'null' : jsonString(r.group);
  // decisions §8.6: present only when set; a dead letter's source shows its error as JSON.
  const dead = r.deadLetterId === undefined ? '' : `,"deadLetterId":"${r.deadLetterId}"`;
  const source = r.source === undefined ? '' : `,"source":${JSON.stringify(sourceJson(r.source))}`;
  return `{"ok":true,"id":"${r.id}","status":"${r.status}","postedBy":${jsonString(r.postedBy)},"postedAt":${r.postedAt},"updatedAt":${r.updatedAt},"finishedAt":${r.finishedAt},"attempts":${r.attempts},"priority":${r.priority},"group":${group},"runAt":${r.runAt},"progress":${r.progress},"result":${r.result},"error":${r.error}${dead}${source}}`;
}

/** A hand-in's wish for its error (decisions §8.2), checked already by the claim schema; undefined when it says none. */
function wishOf(entry: DoneEntry): RetryWish | undefined {
  if (entry.retryIn !== undefined) return { retryIn: entry.retryIn };
  return entry.final === true ? { final: true } : undefined;
}

/**
 * A post's query parameters (decisions §8.1), checked before anything is created: undefined when
 * there are none (a plain post carries no options), a 400 naming each bad one.
 */
/** A post's options (decisions §8.1); a `?callback` the server may not call (decisions §9) is refused before anything is kept. */
function postOptionsOf(query: Record<string, unknown>, allow: PushAllowList): PostOptions | undefined {
  let any = false;
  for (const _ in query) {
    any = true;
    break;
  }
  if (!any) return undefined;
  const { options, errors } = postOptions(query);
  if (options.callback !== undefined && !allow.allows(options.callback)) errors.push({ path: '?callback', message: `callback ${allow.refusal(options.callback)}` });
  if (errors.length > 0) throw new Rejected(errors);
  return options;
}

/**
 * Reads the whole body as UTF-8 text, refusing (413) past `limit` bytes without reading more (the
 * answer then ends the connection: see `closeUnlessBodyRead`), and refusing (400) bytes that are
 * not UTF-8: an item is kept as it was sent, and text with a byte replaced is not what was sent.
 */
export function readBody(req: IncomingMessage, limit: number): Promise<string> {
  const declared = Number(req.headers['content-length']);
  if (declared > limit) return Promise.reject(tooLarge(limit));
  wantBody(req);
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    // Listeners made per request are left unnamed: the bundle keeps the names of named ones by a
    // defineProperty call each time one is made (esbuild's keepNames), a cost every request paid.
    req.on('data', (chunk: Buffer): void => {
      // Past the limit, the rest is read and dropped while the answer (which ends the connection) lingers.
      if (size > limit) return;
      size += chunk.length;
      if (size > limit) {
        chunks.length = 0;
        req.resume();
        reject(tooLarge(limit));
        return;
      }
      chunks.push(chunk);
    });
    req.on('end', () => {
      const bytes = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks);
      if (isUtf8(bytes)) resolve(bytes.toString('utf8'));
      else reject(new Rejected([{ path: '', message: 'the request body is not UTF-8 text' }]));
    });
    // A body cut short, or a connection reset: the client is gone (Node's 'error' here is "aborted").
    req.on('error', () => reject(new ClientGone()));
  });
}

function tooLarge(limit: number): Rejected {
  return new Rejected([{ path: '', message: `the request body is larger than ${limit} bytes` }], 413);
}

/** Text without U+0000 and without a lone surrogate: what every store keeps as it was given. */
function storableText(text: string): boolean {
  // eslint-disable-next-line no-control-regex -- U+0000 is exactly what is refused
  return !/[\u0000\ud800-\udfff]/u.test(text);
}

function parseObject(text: string, what: string): Record<string, unknown> {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new Rejected([{ path: '', message: `${what} is not valid JSON` }]);
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new Rejected([{ path: '', message: `${what} must be a JSON object` }]);
  }
  return value as Record<string, unknown>;
}

/**
 * Checks an item against its queue's schema. A schema may be recursive, and the validator then
 * recurses as deep as the item does: an item nested past {@link SCHEMA_DEPTH} is refused before
 * it is walked, and a stack that runs out all the same is a refusal too, never a 500.
 */
function validateItem(validator: NonNullable<QueueRuntime['validator']>, item: Record<string, unknown>, body: string): void {
  const tooDeep = (): Rejected => new Rejected([{ path: '', message: `the item nests deeper than the queue's schema can check (${SCHEMA_DEPTH} levels)` }]);
  if (nestedDeeperThan(body, SCHEMA_DEPTH)) throw tooDeep();
  // What JSON.parse reads of it must be what every reader reads, or passing the schema says nothing.
  const unsure = unsureForSchema(body);
  if (unsure !== undefined) throw new Rejected([unsure]);
  let valid: boolean;
  try {
    valid = validator(item) as boolean;
  } catch (err) {
    if (err instanceof RangeError) throw tooDeep();
    throw err;
  }
  if (!valid) throw new Rejected(ajvErrors(validator.errors ?? []));
}

function waitParam(raw: string | undefined): number {
  if (raw === undefined) return 0;
  if (!/^\d{1,2}$/.test(raw) || Number(raw) > 30) throw new Rejected([{ path: 'wait', message: 'must be an integer number of seconds from 0 to 30' }]);
  return Number(raw) * 1000;
}

export function ajvErrors(errors: ErrorObject[]): FieldError[] {
  return errors.map((e) => {
    // A missing or unexpected field is named in the path (decisions §3.5: "/field"), as a JSON pointer.
    if (e.keyword === 'required') return { path: `${e.instancePath}/${pointerPart((e.params as { missingProperty: string }).missingProperty)}`, message: e.message ?? 'is required' };
    if (e.keyword === 'additionalProperties') return { path: `${e.instancePath}/${pointerPart((e.params as { additionalProperty: string }).additionalProperty)}`, message: 'is not allowed: the schema allows no other properties here' };
    return { path: e.instancePath || '/', message: e.message ?? 'is invalid' };
  });
}

/** Aborts when the caller hangs up before the answer, or when the server starts to stop. */
function closeSignal(req: IncomingMessage, res: ServerResponse, ctx: ServerContext): AbortSignal {
  const controller = new AbortController();
  const socket = req.socket;
  // The caller may have hung up already, while the request's first look was at the store: its
  // close event is past, so no listener below would ever hear of it.
  if (ctx.stopping.aborted || socket.destroyed || res.destroyed) {
    controller.abort();
    return controller.signal;
  }
  const abort = (): void => controller.abort();
  // Every listener goes when the exchange ends, however it ends: a keep-alive socket serves many
  // requests, and the server's stopping signal lives as long as the process.
  const cleanup = (): void => {
    socket.off('close', abort);
    ctx.stopping.removeEventListener('abort', abort);
    res.off('close', onClose);
    res.off('finish', cleanup);
  };
  const onClose = (): void => {
    cleanup();
    abort();
  };
  res.once('close', onClose);
  res.once('finish', cleanup);
  socket.once('close', abort);
  ctx.stopping.addEventListener('abort', abort, { once: true });
  return controller.signal;
}
