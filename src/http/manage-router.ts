import express, { Router } from 'express';
import { parseDefinitionPath } from '../definitions/names.js';
import type { ServerContext } from './context.js';
import { DefinitionError } from '../definitions/registry.js';
import { BadRequest, HttpError, sendJson } from './errors.js';
import { wantBody } from './unread-body.js';
import { stderrLine } from '../server-output.js';

/** Definition sync (interface §4.5): the manifest, and one definition put or deleted at a time. */
export function manageRouter(ctx: ServerContext): Router {
  const router = Router({ strict: true, caseSensitive: true });

  router.get('/manifest', (_req, res) => sendJson(res, 200, ctx.registry.manifest()));

  const definitionPath = (raw: unknown) => {
    const parsed = parseDefinitionPath(raw);
    if ('error' in parsed) throw new BadRequest(parsed.error);
    return parsed;
  };

  // The body is kept as raw bytes whatever its content type: the stored file is exactly what was
  // sent. A compressed body is refused (415) rather than stored decompressed.
  // A client that asked to be told (`expect: 100-continue`) is told to send the body now, past the master token's check.
  const continueBody: express.RequestHandler = (req, _res, next) => {
    wantBody(req);
    next();
  };
  router.put('/def', continueBody, express.raw({ type: () => true, limit: ctx.maxBody, inflate: false }), async (req, res) => {
    const at = definitionPath(req.query.path);
    const body = Buffer.isBuffer(req.body) ? req.body : Buffer.alloc(0);
    try {
      await ctx.registry.put(at, body);
    } catch (err) {
      if (err instanceof DefinitionError) throw err;
      // The definition was valid; the disk refused it. The old file, if any, is still whole.
      stderrLine(`svcq: cannot write ${at.path}: ${(err as Error).message}`);
      throw new HttpError(500, { error: `${at.path}: the server could not write the definition file` });
    }
    sendJson(res, 200, { ok: true });
  });

  router.delete('/def', async (req, res) => {
    const at = definitionPath(req.query.path);
    sendJson(res, 200, { deleted: await ctx.registry.delete(at) });
  });

  return router;
}
