import express, { Router } from 'express';
import { BULK_KINDS, BulkRefused } from '../operators/bulk.js';
import type { ServerContext } from './context.js';
import { BadRequest, HttpError, sendJson } from './errors.js';
import { wantBody } from './unread-body.js';

/** The largest body a bulk action takes: `{ "status": [...], "max": N }` is a few dozen bytes. */
const BULK_BODY_LIMIT = 16 * 1024;

/**
 * Operators (decisions §5.1, master token like every `/api` route): the queues with their counts,
 * oldest pending age and rates, one queue with its oldest items and leases, pausing and resuming
 * a queue (§8.4), the bulk actions redrive, retry and cancel (§8.6), and the Prometheus exposition.
 */
export function operatorsRouter(ctx: ServerContext): Router {
  const router = Router({ strict: true, caseSensitive: true });

  router.get('/queues', async (_req, res) => sendJson(res, 200, await ctx.operators.list()));

  router.get('/queues/:host/:name', async (req, res) => {
    const detail = await ctx.operators.one(req.params.host, req.params.name);
    if (!detail) throw new HttpError(404, { error: 'no such queue' });
    sendJson(res, 200, detail);
  });

  // No body is read: whatever one is sent is left unread (see sendJson).
  for (const [action, paused] of [['pause', true], ['resume', false]] as const) {
    router.post(`/queues/:host/:name/${action}`, async (req, res) => {
      const answer = await ctx.operators.setPaused(req.params.host, req.params.name, paused);
      if (!answer) throw new HttpError(404, { error: 'no such queue' });
      sendJson(res, 200, answer);
    });
  }

  // decisions §8.6: an undefined pair is 404 before its body is looked at; a bad body is 400 naming
  // the field, with nothing changed.
  const continueBody: express.RequestHandler = (req, _res, next) => {
    wantBody(req);
    next();
  };
  const bulkBody = express.raw({ type: () => true, limit: BULK_BODY_LIMIT, inflate: false });
  for (const kind of BULK_KINDS) {
    router.post(`/queues/:host/:name/${kind}`, continueBody, bulkBody, async (req, res) => {
      // The path is built from `kind`, so Express cannot type its parameters; they are the two named.
      const { host, name } = req.params as { host: string; name: string };
      const bytes = Buffer.isBuffer(req.body) ? req.body : Buffer.alloc(0);
      let answer;
      try {
        answer = await ctx.operators.bulk(host, name, kind, bytes.toString('utf8'));
      } catch (err) {
        if (err instanceof BulkRefused) throw new BadRequest(err.message);
        throw err;
      }
      if (!answer) throw new HttpError(404, { error: 'no such queue' });
      sendJson(res, 200, answer);
    });
  }

  router.get('/metrics', async (_req, res) => {
    const text = await ctx.operators.exposition();
    res.writeHead(200, {
      'content-type': ctx.operators.metrics.contentType,
      'content-length': Buffer.byteLength(text),
      'access-control-allow-origin': '*',
    });
    res.end(text);
  });

  return router;
}
