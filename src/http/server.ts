import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { setMaxListeners } from 'node:events';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { DefinitionRegistry } from '../definitions/registry.js';
import { EmbeddedStore } from '../store/embedded-store.js';
import { openTools } from '../tools/index.js';
import { createApp } from './app.js';
import type { ServerContext } from './context.js';
import { resolveMasterToken } from './master-token.js';
import { createQueueRouter } from './queue-router.js';

export interface ServeOptions {
  root: string;
  port: number;
  bind: string;
  masterToken?: string;
  maxBody?: number;
  /** Access-log rotation size in bytes, rotated files kept, and ms between stats samples (decisions §5). */
  logMaxBytes?: number;
  logKeep?: number;
  statsInterval?: number;
  /** Journal bytes past which the store writes a snapshot. */
  compactBytes?: number;
  /** Where warnings go (a torn journal record, a definition that no longer parses). */
  warn?: (line: string) => void;
}

export interface RunningServer {
  url: string;
  port: number;
  masterToken: string;
  masterTokenFile?: string;
  masterTokenCreated: boolean;
  /** Stops accepting, answers long polls, finishes in-flight requests, flushes everything. */
  close(): Promise<void>;
}

/** `<root>/_svcq`: everything the server keeps that is not a definition. */
export function homeOf(root: string): string {
  return path.join(root, '_svcq');
}

/**
 * Opens the store and the tools, and listens. Requests under `/api/` go to the Express app;
 * everything else is the queue domain and goes to the lean queue router.
 */
export async function startServer(options: ServeOptions): Promise<RunningServer> {
  const warn = options.warn ?? ((line: string) => process.stderr.write(`svcq: warning: ${line}\n`));
  const root = path.resolve(options.root);
  const home = homeOf(root);
  const master = await resolveMasterToken(home, options.masterToken);
  const registry = await DefinitionRegistry.load(root, warn);
  const tools = await openTools({ home, logMaxBytes: options.logMaxBytes, logKeep: options.logKeep, statsInterval: options.statsInterval, warn });
  const store = new EmbeddedStore({
    dir: path.join(home, 'store'),
    hooks: tools.hooks,
    compactBytes: options.compactBytes,
    configFor: (key) => {
      const slash = key.indexOf('/');
      return registry.queue(key.slice(0, slash), key.slice(slash + 1))?.config;
    },
    warn,
  });
  await store.open();

  const stopping = new AbortController();
  // Every waiting claim or fetch listens for the stop: there are as many as there are long polls.
  setMaxListeners(0, stopping.signal);
  const ctx: ServerContext = {
    root,
    masterToken: master.token,
    registry,
    store,
    accessLog: tools.accessLog,
    taskHistory: tools.tasks,
    statsInterval: tools.sampler.intervalMs,
    maxBody: options.maxBody ?? 1024 * 1024,
    now: Date.now,
    stopping: stopping.signal,
  };
  const app = createApp(ctx);
  const queues = createQueueRouter(ctx);

  /** Logs the exchange once the response has been handed to the socket (one shared listener: no closure per request). */
  function logFinished(this: LoggedResponse): void {
    const req = this.req;
    const seen = this[REQUEST];
    const url = seen.url;
    const q = url.indexOf('?');
    ctx.accessLog.record({
      ts: Date.now(),
      method: req.method ?? '',
      host: req.headers.host ?? '',
      path: q === -1 ? url : url.slice(0, q),
      status: this.statusCode,
      ms: Math.round((performance.now() - seen.started) * 1000) / 1000,
      // Bytes on the wire, headers included: a response written with writeHead(status, headers) keeps no content-length to read back.
      bytes: req.socket.bytesWritten - seen.sentBefore,
      ip: req.socket.remoteAddress ?? '',
    });
  }

  const server: Server = createServer({ keepAliveTimeout: 65_000 }, (req: IncomingMessage, res: ServerResponse) => {
    // The URL is taken now: Express rewrites req.url while it routes into a mounted router.
    const url = req.url ?? '/';
    (res as LoggedResponse)[REQUEST] = new RequestSeen(performance.now(), url, req.socket.bytesWritten);
    // 'finish' is emitted at most once per response.
    res.on('finish', logFinished);
    if (url === '/api' || url.startsWith('/api/') || url.startsWith('/api?')) app(req, res);
    else queues(req, res);
  });

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port, options.bind, () => resolve());
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
        server.closeIdleConnections();
        await closed;
        await store.close();
        await tools.close();
      })()),
  };
}

/** What the access log needs to know of a request from the moment it arrived. */
class RequestSeen {
  constructor(
    readonly started: number,
    readonly url: string,
    readonly sentBefore: number,
  ) {}
}

const REQUEST = Symbol('svcq.request');
type LoggedResponse = ServerResponse & { [REQUEST]: RequestSeen };
