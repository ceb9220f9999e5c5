import { Router } from 'express';
import type { ServerContext } from './context.js';
import { HttpError, sendJson } from './errors.js';

/**
 * Operators (decisions §5.1, master token like every `/api` route): the queues with their counts,
 * oldest pending age and rates, one queue with its oldest items and leases, pausing and resuming
 * a queue (§8.4), and the Prometheus exposition.
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
