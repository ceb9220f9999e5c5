import path from 'node:path';
import { Router, type Request } from 'express';
import { isHost, isQueueName } from '../definitions/names.js';
import { rangeStart, sendEmpty, sendToolFile } from '../tools/file-response.js';
import {
  ACTIVE_LOG,
  isItemId,
  isPayloadKind,
  listFiles,
  logsDir,
  parseStatFile,
  parseTaskFile,
  parseWhich,
  payloadsDir,
  rotatedLogName,
  rotatedLogTs,
  sizeOf,
  statsDir,
  tasksDir,
} from '../tools/files.js';
import { TOOLS_DEFAULTS } from '../tools/index.js';
import { payloadFile } from '../tools/payload-archive.js';
import { takeSnapshot } from '../tools/stats.js';
import type { ServerContext } from './context.js';
import { BadRequest, sendJson } from './errors.js';

/**
 * Read-only tools endpoints (interface §4.6): access logs, stats, task history, payloads. Every
 * parameter is checked against its exact shape before a path is built from it (decisions §5):
 * malformed is a 400 `{ error }`, well-formed but absent an empty 200.
 */
export function toolsRouter(ctx: ServerContext): Router {
  // Exact paths only, like the management routes (decisions §4): `/logs/` or `/LOGS` get the wall.
  const router = Router({ strict: true, caseSensitive: true });
  // Everything that is not a definition lives under <root>/_svcq (decisions §1.1).
  const home = path.join(ctx.root, '_svcq');

  router.get('/logs', async (_req, res) => {
    const dir = logsDir(home);
    const size = await sizeOf(path.join(dir, ACTIVE_LOG));
    const rotated = (await listFiles(dir, (name) => {
      const ts = rotatedLogTs(name);
      return ts === undefined ? undefined : { ts };
    })).map((f) => ({ ts: f.ts, size: f.size })).sort((a, b) => a.ts - b.ts);
    sendJson(res, 200, { active: size === null ? null : { size }, rotated });
  });

  router.get('/logs/file', async (req, res) => {
    const raw = param(req, 'which', 'expected "active" or a rotated file\'s ts from GET /api/v2/logs');
    const which = parseWhich(raw);
    if (!which) throw new BadRequest(`which "${printable(raw)}" is not "active" or a rotated file's ts (a number of milliseconds)`);
    const name = 'ts' in which ? rotatedLogName(which.ts) : ACTIVE_LOG;
    await sendToolFile(res, path.join(logsDir(home), name), rangeStart(req.get('range')));
  });

  router.get('/stats', async (_req, res) => {
    const files = (await listFiles(statsDir(home), parseStatFile)).map((f) => ({ name: f.name, type: f.type, date: f.date, size: f.size }));
    sendJson(res, 200, { interval: ctx.statsInterval ?? TOOLS_DEFAULTS.statsInterval, files });
  });

  router.get('/stats/file', async (req, res) => {
    const name = param(req, 'name', 'expected <type>-YYYY-MM-DD.log');
    if (!parseStatFile(name)) throw new BadRequest(`name "${printable(name)}" is not <type>-YYYY-MM-DD.log with type cpu, memory, disk, diskio or netio`);
    await sendToolFile(res, path.join(statsDir(home), name), rangeStart(req.get('range')));
  });

  router.get('/stats/now', async (_req, res) => sendJson(res, 200, await (ctx.snapshot ?? takeSnapshot)()));

  router.get('/tasks', async (_req, res) => {
    // Events reach the day-files a moment after the journal; a reader sees every acknowledged one.
    await ctx.taskHistory?.flush();
    const files = (await listFiles(tasksDir(home), parseTaskFile)).map((f) => ({ name: f.name, date: f.date, size: f.size }));
    sendJson(res, 200, { files });
  });

  router.get('/tasks/file', async (req, res) => {
    const name = param(req, 'name', 'expected tasks-YYYY-MM-DD.log');
    if (!parseTaskFile(name)) throw new BadRequest(`name "${printable(name)}" is not tasks-YYYY-MM-DD.log`);
    await ctx.taskHistory?.flush();
    await sendToolFile(res, path.join(tasksDir(home), name), rangeStart(req.get('range')));
  });

  router.get('/tasks/payload', async (req, res) => {
    const host = param(req, 'host', 'expected the queue\'s domain');
    const queue = param(req, 'queue', 'expected a queue name');
    const id = param(req, 'id', 'expected 16 hexadecimal characters');
    const kind = param(req, 'kind', 'expected item, progress, result or error');
    if (!isHost(host)) throw new BadRequest(`host "${printable(host)}" is not a valid host (lowercase DNS name or IPv4 address)`);
    if (!isQueueName(queue)) throw new BadRequest(`queue "${printable(queue)}" is not a valid queue name`);
    if (!isItemId(id)) throw new BadRequest(`id "${printable(id)}" is not 16 lowercase hexadecimal characters`);
    if (!isPayloadKind(kind)) throw new BadRequest(`kind "${printable(kind)}" is not one of item, progress, result, error`);
    if (!ctx.registry.queue(host, queue)) throw new BadRequest(`host "${host}" has no queue "${queue}"`);
    // Payloads are served whole (interface §4.6: 200): the Range header is for the growing
    // day-files only, so a payload says `accept-ranges: none` rather than promise what it ignores.
    if (!ctx.payloads) return sendToolFile(res, payloadFile(payloadsDir(home), host, queue, id, kind), undefined, false);
    const bytes = await ctx.payloads.read(host, queue, id, kind);
    if (!bytes || bytes.length === 0) return sendEmpty(res, false);
    res.writeHead(200, { 'content-type': 'application/octet-stream', 'accept-ranges': 'none', 'content-length': bytes.length, 'access-control-allow-origin': '*' });
    res.end(bytes);
  });

  return router;
}

/** One query parameter given exactly once, or a 400 naming it. */
function param(req: Request, name: string, expected: string): string {
  const value = req.query[name];
  if (typeof value !== 'string') {
    throw new BadRequest(value === undefined ? `${name} is required: ${expected}` : `${name} must be given once: ${expected}`);
  }
  return value;
}

/** Keeps control characters and very long values out of error sentences. */
function printable(s: string): string {
  // eslint-disable-next-line no-control-regex -- control characters are exactly what is being removed
  const clean = s.replace(/[\u0000-\u001f\u007f]/g, '?');
  return clean.length > 80 ? `${clean.slice(0, 77)}...` : clean;
}
