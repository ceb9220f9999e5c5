import { createServer, ServerResponse, type IncomingMessage, type Server } from 'node:http';
import { setMaxListeners } from 'node:events';
import type { AddressInfo, Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { DefinitionRegistry } from '../definitions/registry.js';
import { PushAllowList } from '../push/allow-list.js';
import { CallbackDelivery } from '../push/callbacks.js';
import { openStore, parseStoreLocation } from '../store/open-store.js';
import { EmbeddedStore } from '../store/embedded-store.js';
import type { PayloadKind } from '../store/store.js';
import { LongPolls } from '../waiting/long-poll.js';
import { openTools } from '../tools/index.js';
import { payloadsDir } from '../tools/files.js';
import { placeStaged, sweepStaged } from '../durable-files.js';
import { Operators } from '../operators/operators.js';
import { Pusher } from '../push/pusher.js';
import type { ServerContext } from './context.js';
import { FileMasterTokenStore, resolveMasterToken, resolveSharedMasterToken } from './master-token.js';
import { createQueueRouter } from './queue-router.js';
import { sendJson } from './errors.js';
import { wallAndClose } from './wall.js';
import { endAfterAnswer, holdContinue, lastExchange, lingering } from './unread-body.js';
import { stderrLine } from '../server-output.js';
import { ScheduleTicker } from '../store/schedule-ticker.js';
import { benchOff } from '../bench-off.js';

export interface ServeOptions {
  root: string;
  port: number;
  bind: string;
  masterToken?: string;
  /** On a shared database: record this node's master token as the nodes' one, in place of the one recorded. */
  replaceMasterToken?: boolean;
  maxBody?: number;
  /** Access-log rotation size in bytes, rotated files kept, and ms between stats samples (decisions §5). */
  logMaxBytes?: number;
  logKeep?: number;
  statsInterval?: number;
  /** Task-history day-files of days more than this many days past are removed (0: every one kept). */
  historyDays?: number;
  /** Stats day-files of days more than this many days past are removed (0: every one kept). */
  statsDays?: number;
  /** Journal bytes past which the store writes a snapshot. */
  compactBytes?: number;
  /** Where items live (decisions §1.1 `--store`): absent or `embedded`, or a `postgres://` URL shared by every node. */
  store?: string;
  /**
   * At a stop, how long a connection may take to deliver a whole request before it is closed
   * (default 5000 ms, decisions §1.1). Requests already received are finished first.
   */
  shutdownGraceMs?: number;
  /** Where warnings go (a torn journal record, a definition that no longer parses). */
  warn?: (line: string) => void;
  /** decisions §9 `--push-allow`: URL prefixes push targets and callbacks may use (each value may hold several, comma-separated); none: no URL. */
  pushAllow?: string[];
}

export interface RunningServer {
  url: string;
  port: number;
  masterToken: string;
  masterTokenFile?: string;
  masterTokenCreated: boolean;
  /**
   * Stops accepting, answers long polls at once, finishes in-flight requests, closes keep-alive
   * connections, cuts any connection still short of a whole request after the grace period,
   * flushes everything. No client, however slow or silent, keeps it from ending.
   */
  close(): Promise<void>;
}

/** The answer a connection is writing or will write next (Node's own record of it), if any. */
function answerOf(socket: Socket): ServerResponse | undefined {
  return (socket as Socket & { _httpMessage?: ServerResponse | null })._httpMessage ?? undefined;
}

/** Whether an earlier request's answer on this connection is still to be finished (a request pipelined behind it waits for it). */
function answering(socket: Socket, res: ServerResponse): boolean {
  const current = answerOf(socket);
  return current !== undefined && current !== res && !current.writableFinished;
}

/** `<root>/_svcq`: everything the server keeps that is not a definition. */
export function homeOf(root: string): string {
  return path.join(root, '_svcq');
}

/**
 * Listens, then opens the store and the tools. Requests under `/api/` go to the Express app;
 * everything else is the queue domain and goes to the lean queue router.
 *
 * It listens first, so that a start that cannot have its port (already in use, say) fails before
 * it has created anything under the root; a request that arrives meanwhile waits for the start.
 */
export async function startServer(options: ServeOptions): Promise<RunningServer> {
  const warn = options.warn ?? ((line: string) => stderrLine(`svcq: warning: ${line}`));
  let handle: ((req: IncomingMessage, res: ServerResponse) => void) | undefined;
  let started: (() => void) | undefined;
  const starting = new Promise<void>((resolve) => (started = resolve));
  const server: Server = createServer(
    // A missing Host is answered by svcq (JSON, like every answer), not by Node. A request's
    // headers have 20 s to arrive (Node's default is a minute).
    // (Node checks those timeouts every connectionsCheckingInterval, 30 s by default.)
    { keepAliveTimeout: 65_000, headersTimeout: 20_000, connectionsCheckingInterval: 5_000, requireHostHeader: false },
    (req: IncomingMessage, res: ServerResponse) => {
      // A request read from a connection whose last answer is under way or went out
      // (`connection: close`) is not served (RFC 9112 §9.6). An answer still to be written is
      // left to finish (Node ends the connection after it); otherwise the connection ends now.
      if (lingering(req.socket)) {
        if (!answering(req.socket, res)) req.socket.destroy();
        return;
      }
      if (handle) handle(req, res);
      else void starting.then(() => handle!(req, res));
    },
  );
  answerProtocolErrors(server);
  // Open connections: at a stop, each one's answer under way says it is the connection's last.
  // Kept per connection, not per request, so that a request pays nothing for it.
  const open = new Set<Socket>();
  server.on('connection', (socket: Socket) => {
    open.add(socket);
    socket.once('close', () => open.delete(socket));
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port, options.bind, () => resolve());
  });
  try {
    return await serve(server, open, options, warn, (h) => {
      handle = h;
      started!();
    });
  } catch (err) {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
    throw err;
  }
}

async function serve(server: Server, open: ReadonlySet<Socket>, options: ServeOptions, warn: (line: string) => void, ready: (handle: (req: IncomingMessage, res: ServerResponse) => void) => void): Promise<RunningServer> {
  const root = path.resolve(options.root);
  const home = homeOf(root);
  const location = parseStoreLocation(options.store);
  // A prefix that is not a URL stops the start before anything is opened.
  const pushAllow = PushAllowList.parse(options.pushAllow);
  // Definitions live with the items: files under the root, or the shared database, where every
  // node follows the others' changes (decisions §6.1).
  const definitions =
    location.kind === 'postgres'
      ? await import('../store/postgres/pg-definition-store.js').then(({ openPostgresDefinitions }) => openPostgresDefinitions(location.url, warn)).catch((err: Error) => {
          throw new Error(`cannot reach the PostgreSQL store at ${new URL(location.url).host} (${err.message})`, { cause: err });
        })
      : undefined;
  const registry = await DefinitionRegistry.load(definitions?.store ?? root, warn, (url) => pushAllow.allows(url) ? null : pushAllow.refusal(url));
  const tools = await openTools({ home, logMaxBytes: options.logMaxBytes, logKeep: options.logKeep, statsInterval: options.statsInterval, historyDays: options.historyDays, statsDays: options.statsDays, warn });
  // Rates and metrics learn of durable events and group commits from the store itself.
  const operators = new Operators(registry);
  const opened = await openStore({
    location,
    home,
    hooks: tools.hooks,
    compactBytes: options.compactBytes,
    configFor: (key) => {
      const slash = key.indexOf('/');
      return registry.queue(key.slice(0, slash), key.slice(slash + 1))?.config;
    },
    warn,
    observer: benchOff.metrics ? { committed: () => undefined, events: () => undefined } : operators.observer,
  });
  const { store, notifier } = opened;
  // Made only once the store is open: a start that fails before (a database that cannot be
  // reached, say) leaves no token behind that the next start would present as the cluster's.
  const tokenFile = new FileMasterTokenStore(home);
  const master = definitions ? await resolveSharedMasterToken(options.masterToken, tokenFile, definitions.store, options.replaceMasterToken ?? false) : await resolveMasterToken(options.masterToken, tokenFile);
  // A definition change reaches the store's timers at once (a timeout brought sooner falls on time).
  registry.onQueueChange((key) => store.rulesChanged?.(key));
  // decisions §8.3: every node ticks the schedules; the store posts each occurrence once.
  const ticker = new ScheduleTicker(store, () => registry.queues().map((q) => ({ key: q.key, host: q.host, name: q.name, config: q.config })), warn);
  registry.onQueueChange((key) => ticker.changed(key));
  ticker.start();
  operators.watch(store);
  // decisions §9.2: every node delivers the callbacks owed, whichever node's change made them owed.
  const callbacks = new CallbackDelivery({
    store,
    configFor: (key) => {
      const slash = key.indexOf('/');
      return registry.queue(key.slice(0, slash), key.slice(slash + 1))?.config;
    },
    allow: pushAllow,
    warn,
    counted: (key, outcome) => operators.metrics.callback(key, outcome),
  });
  callbacks.start();
  if (opened.outbox && !benchOff.history) await tools.tasks.start(opened.outbox);

  const stopping = new AbortController();
  const swept = sweepLeftovers(root, home, stopping.signal, warn, store instanceof EmbeddedStore ? store : undefined);
  // Every waiting claim or fetch listens for the stop: there are as many as there are long polls.
  setMaxListeners(0, stopping.signal);
  const ctx: ServerContext = {
    root,
    masterToken: master.token,
    registry,
    store,
    waits: new LongPolls(store, notifier),
    accessLog: tools.accessLog,
    taskHistory: tools.tasks,
    statsInterval: tools.sampler.intervalMs,
    snapshot: tools.snapshot,
    maxBody: options.maxBody ?? 1024 * 1024,
    stopping: stopping.signal,
    operators,
    pushAllow,
    payloads: opened.payloads,
  };
  // A held claim or fetch whose queue is deleted, or whose caller loses the access, gets the wall at once (decisions §2.4).
  registry.onHostChange((host) => ctx.waits.definitionsChanged(host));
  // decisions §9.1: this node works every push queue as the worker push:<node>.
  const pusher = new Pusher({
    store,
    waits: ctx.waits,
    queue: (key) => {
      const slash = key.indexOf('/');
      return registry.queue(key.slice(0, slash), key.slice(slash + 1));
    },
    queues: () => registry.queues(),
    allow: pushAllow,
    maxBody: ctx.maxBody,
    observer: operators,
    warn,
  });
  registry.onQueueChange((key) => pusher.changed(key));
  operators.watchPushes(pusher);
  pusher.start();
  const app = apiInBackground(ctx, warn);
  const queues = createQueueRouter(ctx);

  /** Logs the exchange once the response has been handed to the socket (one shared listener: no closure per request). */
  function logFinished(this: LoggedResponse): void {
    log(this, this.statusCode);
  }

  /**
   * A connection that closed before its response was finished (a client that gave up on a long
   * poll, or a download cut short) gets its line too: the status sent, or 499 (the client closed
   * the request) when none was. A finished response was logged by `logFinished`.
   */
  function logAbandoned(this: LoggedResponse): void {
    if (!this.writableFinished) log(this, this.headersSent ? this.statusCode : CLIENT_CLOSED);
  }

  function log(res: LoggedResponse, status: number): void {
    const req = res.req;
    const seen = res[REQUEST];
    // One line per request, whichever of the two events comes (a late answer to a closed connection may still finish).
    if (seen.logged) return;
    seen.logged = true;
    const url = seen.url;
    const q = url.indexOf('?');
    // A keep-alive connection whose request was under way when the stop came ends with its answer,
    // and serves nothing read from it later: a request the client sent before it saw our end
    // would be carried out with no way left to answer it.
    if (stopping.signal.aborted && !req.socket.destroyed) {
      lastExchange(req.socket);
      req.socket.end();
    }
    const ms = performance.now() - seen.started;
    const path = q === -1 ? url : url.slice(0, q);
    if (!benchOff.accessLog) {
      ctx.accessLog.record({
        ts: Date.now(),
        method: req.method ?? '',
        host: req.headers.host ?? '',
        path,
        status,
        ms: Math.round(ms * 1000) / 1000,
        // Bytes on the wire, headers included: a response written with writeHead(status, headers) keeps no content-length to read back.
        bytes: req.socket.bytesWritten - seen.sentBefore,
        ip: seen.ip,
      });
    }
    if (!benchOff.metrics) operators.request(isApiPath(path) ? 'api' : 'queue', status, ms / 1000);
  }

  ready((req, res) => {
    // The URL is taken now: Express rewrites req.url while it routes into a mounted router.
    let url = req.url ?? '/';
    // The absolute form (`POST http://host/queue`, RFC 9112 §3.2.2): the target's authority is the
    // host, whatever the Host header says.
    if (url.charCodeAt(0) !== 47 /* / */ && url !== '*') url = takeAbsoluteForm(req, url);
    (res as LoggedResponse)[REQUEST] = new RequestSeen(performance.now(), url, req.socket.bytesWritten, req.socket.remoteAddress ?? '');
    // 'finish' is emitted at most once per response.
    res.on('finish', logFinished);
    res.on('close', logAbandoned);
    // Stopping: this is the connection's last exchange (the answer carries `connection: close`).
    if (stopping.signal.aborted) res.shouldKeepAlive = false;
    const badHost = hostProblem(req);
    if (badHost !== undefined) {
      endAfterAnswer(res);
      return sendJson(res, 400, { error: badHost });
    }
    if (isApiPath(url)) app(req, res);
    else queues(req, res);
  });

  const address = server.address() as AddressInfo;
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;

  let closing: Promise<void> | undefined;
  return {
    url: `http://${host}:${address.port}`,
    port: address.port,
    masterToken: master.token,
    masterTokenFile: master.file,
    masterTokenCreated: master.created,
    close: () =>
      (closing ??= (async () => {
        const closed = new Promise<void>((resolve) => server.close(() => resolve()));
        stopping.abort();
        // decisions §9.1: no new delivery; those in flight finish within the grace, or are released.
        const pushed = pusher.stop(options.shutdownGraceMs ?? 5000);
        // Requests under way are finished, and their answers carry `connection: close`, so that
        // no client sends another request on a connection that is about to end.
        for (const socket of open) {
          const res = answerOf(socket);
          if (!res || res.headersSent) continue;
          res.shouldKeepAlive = false;
          lastExchange(socket);
        }
        server.closeIdleConnections();
        // server.close() also ends Node's own request timeouts: a connection that never delivers
        // a whole request (silent, half a header block, a body trickling in) is cut here instead.
        const grace = setTimeout(() => server.closeAllConnections(), options.shutdownGraceMs ?? 5000);
        await closed;
        clearTimeout(grace);
        await pushed;
        await swept;
        await ticker.close();
        await callbacks.close();
        await opened.close();
        registry.close();
        await definitions?.close();
        await tools.close();
      })()),
  };
}

/**
 * Removes, in the background, the files a crash left staged under the root and never put in
 * place: archived payloads and definitions are written under a temporary name first (see
 * `stageFile`), and a process killed between the write and the rename leaves that file behind.
 * Files this process is staging are its requests' and stay. A payload whose change did become
 * durable (the kill came after the journal write, before the rename: the item holds exactly
 * these bytes) is put in place instead, so that the archive agrees with the items (decisions §5).
 */
async function sweepLeftovers(root: string, home: string, stopped: AbortSignal, warn: (line: string) => void, store: EmbeddedStore | undefined): Promise<void> {
  const options = { stopped: () => stopped.aborted };
  const payloads = payloadsDir(home);
  const place = async (tmp: string, file: string): Promise<boolean> => {
    const [host, queue] = path.relative(payloads, path.dirname(file)).split(path.sep);
    const m = /^([0-9a-f]{16})\.(item|progress|result|error)$/.exec(path.basename(file));
    if (!store || !host || !queue || !m) return false;
    const bytes = await readFile(tmp).catch(() => undefined);
    // Asked and renamed in one turn: a payload a request publishes after this is renamed after it.
    const text = store.payloadText(host, queue, m[1]!, m[2] as PayloadKind);
    if (bytes === undefined || text === null || !bytes.equals(Buffer.from(text))) return false;
    await placeStaged(tmp, file);
    return true;
  };
  try {
    // <payloads>/<host>/<queue>/…, and <root>/<host>/svc-queues|svc-users/… (not the server's own home).
    const fromPayloads = await sweepStaged(payloads, { ...options, depth: 2, place });
    const fromDefinitions = await sweepStaged(root, { ...options, depth: 2, skip: (name, depth) => (depth === 2 ? name === path.basename(home) : name !== 'svc-queues' && name !== 'svc-users') });
    const removed = fromPayloads.removed + fromDefinitions.removed;
    if (removed > 0) warn(`removed ${removed} half-written file${removed === 1 ? '' : 's'} a crash left under ${root} (written under a temporary name, never put in place)`);
    const placed = fromPayloads.placed;
    if (placed > 0) warn(`archived ${placed} payload${placed === 1 ? '' : 's'} a crash left staged after their change was made durable`);
  } catch (err) {
    warn(`could not look for half-written files under ${root}: ${(err as Error).message}`);
  } finally {
    store?.stagedLookedAt();
  }
}

/**
 * What Node answers by itself, answered in JSON like everything else: a request that is not HTTP
 * (400), headers past 16 KiB (431), a request that did not arrive whole in time (408), an
 * expectation other than `100-continue` (417); a method its parser does not know gets the wall, as
 * any method no table lists does. `100 Continue` is held back until a handler wants
 * the body (see `holdContinue`): a request answered without it (the wall) is never invited to send it.
 */
function answerProtocolErrors(server: Server): void {
  server.on('clientError', (err: NodeJS.ErrnoException, socket: Duplex) => {
    const s = socket as Carrying & { [REFUSED]?: true };
    // Node's parser stays broken and reports it again for every later packet: answered once.
    if (s[REFUSED]) return;
    s[REFUSED] = true;
    afterEarlierAnswers(s, () => {
      // Nothing may be written into an answer already under way; a reset connection hears nothing.
      if (s.writable && !s._httpMessage?.headersSent && err.code !== 'ECONNRESET') s.write(unknownMethod(err) ? wallAndClose() : refusal(err));
      s.destroy();
    });
  });
  server.on('checkContinue', (req: IncomingMessage, res: ServerResponse) => {
    holdContinue(req, res);
    server.emit('request', req, res);
  });
  // CONNECT is a method no table lists: the wall, like any other (decisions §4). Node hands such a
  // request over as a bare socket, and with nobody listening cuts it without a word; here it gets
  // an answer of its own and is routed like every request. The parser is gone, so the answer is
  // the connection's last.
  server.on('connect', (req: IncomingMessage, socket: Socket) => {
    afterEarlierAnswers(socket, () => {
      if (socket.destroyed) return;
      const res = new ServerResponse(req);
      res.shouldKeepAlive = false;
      res.assignSocket(socket);
      res.once('finish', () => {
        res.detachSocket(socket);
        socket.destroySoon();
      });
      server.emit('request', req, res);
    });
  });
  server.on('checkExpectation', (_req: IncomingMessage, res: ServerResponse) => {
    endAfterAnswer(res);
    sendJson(res, 417, { error: 'the only expectation this server meets is 100-continue' });
  });
}

const REFUSED = Symbol('svcq.refused');

type Carrying = Duplex & { _httpMessage?: ServerResponse | null };

/**
 * Runs `then` once the answers to the requests before this one on the connection are written, each
 * whole (RFC 9112 §9.3.2: answers go in the order of the requests), for a request that Node's
 * parser does not hand over as usual (a refused one, a CONNECT). An answer stays the connection's
 * until Node has seen it finish, and closes after that.
 */
function afterEarlierAnswers(socket: Carrying, then: () => void): void {
  const earlier = socket._httpMessage;
  if (earlier && earlier.req.complete && !socket.destroyed) earlier.once('close', () => afterEarlierAnswers(socket, then));
  else then();
}

/** The answer, in JSON, to a request Node's parser refused. */
function refusal(err: NodeJS.ErrnoException): string {
  const [status, reason, error] =
    err.code === 'HPE_HEADER_OVERFLOW'
      ? [431, 'Request Header Fields Too Large', 'the request line and headers are larger than 16 KiB']
      : err.code === 'ERR_HTTP_REQUEST_TIMEOUT'
        ? [408, 'Request Timeout', 'the request did not arrive whole in time']
        : err.code === 'HPE_CHUNK_EXTENSIONS_OVERFLOW'
          ? [413, 'Payload Too Large', 'the request body\'s chunk extensions are too large']
          : [400, 'Bad Request', `the request is not valid HTTP/1.1 (${err.code ?? err.message})`];
  const body = JSON.stringify({ error });
  return `HTTP/1.1 ${status} ${reason}\r\ncontent-type: application/json; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(body)}\r\naccess-control-allow-origin: *\r\nconnection: close\r\n\r\n${body}`;
}

/** The characters of a token (RFC 9110 §5.6.2), of which a method is made. */
const TCHAR = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]$/;

/**
 * Whether Node refused a request for its method alone: a token its parser does not know (`FOO`,
 * `get`: methods are case-sensitive). Such a request is well-formed HTTP with a method no table
 * lists, so it gets the wall (decisions §4), not a 400 that calls it something other than HTTP.
 * The parser stops at the first character no method it knows goes on with: a token character,
 * or the space after a method that is only the beginning of one it knows (`GE`).
 */
function unknownMethod(err: NodeJS.ErrnoException): boolean {
  const { rawPacket, bytesParsed } = err as NodeJS.ErrnoException & { rawPacket?: Buffer; bytesParsed?: number };
  if (err.code !== 'HPE_INVALID_METHOD' || rawPacket === undefined || bytesParsed === undefined || bytesParsed >= rawPacket.length) return false;
  const at = String.fromCharCode(rawPacket[bytesParsed]!);
  if (TCHAR.test(at)) return true;
  return at === ' ' && bytesParsed > 0 && TCHAR.test(String.fromCharCode(rawPacket[bytesParsed - 1]!));
}

/** What the router and the access log see of a target that is neither a path nor an absolute http URL: the wall, and no credentials logged. */
const NOT_A_PATH = '/-';

/**
 * An absolute-form target (`http://host/path`) becomes its path, and its authority the request's
 * Host. Any other form is left for the routers, which give it the wall.
 */
function takeAbsoluteForm(req: IncomingMessage, url: string): string {
  // Cut with indexOf, not one regular expression: a target is up to 16 KiB of anybody's bytes, and
  // a pattern with two open-ended parts backtracks over all of them (0.2 s for one request line).
  const scheme = /^https?:\/\//i.exec(url);
  const rest = scheme === null ? '' : url.slice(scheme[0].length);
  let cut = rest.length;
  for (const c of ['/', '?']) {
    const at = rest.indexOf(c);
    if (at !== -1 && at < cut) cut = at;
  }
  const authority = rest.slice(0, cut);
  // Userinfo (`http://user:pass@host/…`, RFC 9110 §4.2.4) and a fragment (never part of a target)
  // are refused, as is any other form: the wall.
  if (scheme === null || authority.includes('@') || rest.includes('#')) {
    req.url = NOT_A_PATH;
    return NOT_A_PATH;
  }
  const path = rest.slice(cut);
  const target = path === '' ? '/' : path.startsWith('?') ? `/${path}` : path;
  req.headers.host = authority;
  req.url = target;
  return target;
}

/**
 * Why a request's Host cannot be trusted (RFC 9112 §3.2: an HTTP/1.1 request has exactly one), or
 * undefined. Answered 400 before any route: it says nothing of what the server holds.
 */
function hostProblem(req: IncomingMessage): string | undefined {
  if (req.headers.host === undefined) return req.httpVersionMajor === 1 && req.httpVersionMinor === 0 ? undefined : 'the request has no Host header';
  const raw = req.rawHeaders;
  let hosts = 0;
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!;
    if (name.length === 4 && name.toLowerCase() === 'host') hosts++;
  }
  return hosts > 1 ? 'the request has more than one Host header' : undefined;
}

/**
 * The Express app that answers `/api/…` (management, tools, operators), loaded in the background
 * from the start rather than before it: Express and its body parsers were a third of the time a
 * server took to listen, and the queue endpoints, which take most requests, use neither. An
 * `/api/` request that comes before it is loaded waits for it, as any request that comes before
 * the start has finished waits for that. One that cannot be loaded (an installation missing a
 * file) is said once, and every `/api/` request is answered 500 with why.
 */
function apiInBackground(ctx: ServerContext, warn: (line: string) => void): (req: IncomingMessage, res: ServerResponse) => void {
  let app: ((req: IncomingMessage, res: ServerResponse) => void) | undefined;
  const loading = import('./app.js').then(({ createApp }) => (app = createApp(ctx)));
  const failed = (err: Error): string => `the /api/ endpoints could not be loaded (${err.message})`;
  loading.catch((err: Error) => warn(failed(err)));
  return (req, res) => {
    if (app) return app(req, res);
    loading.then(
      (loaded) => loaded(req, res),
      (err: Error) => sendJson(res, 500, { error: failed(err) }),
    );
  };
}

/** Whether a request URL is for the Express app (`/api…`) rather than the queue domain. */
function isApiPath(url: string): boolean {
  return url === '/api' || url.startsWith('/api/') || url.startsWith('/api?');
}

/** What the access log needs to know of a request from the moment it arrived. */
class RequestSeen {
  logged = false;
  constructor(
    readonly started: number,
    readonly url: string,
    readonly sentBefore: number,
    /** Taken as the request arrives: a socket already closed no longer knows its peer. */
    readonly ip: string,
  ) {}
}

const REQUEST = Symbol('svcq.request');
/** The status an access line gives a request whose client went away before any answer (as nginx logs it). */
const CLIENT_CLOSED = 499;
type LoggedResponse = ServerResponse & { [REQUEST]: RequestSeen };
