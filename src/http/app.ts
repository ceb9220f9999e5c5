import express, { type NextFunction, type Request, type Response } from 'express';
import cors from 'cors';
import { bearerToken, tokensEqual } from './auth.js';
import type { ServerContext } from './context.js';
import { NotFound, sendError, sendJson } from './errors.js';
import { manageRouter } from './manage-router.js';
import { operatorsRouter } from './operators-router.js';
import { toolsRouter } from './tools-router.js';

export const API_VERSION = 2;

/**
 * Builds the Express app that serves `/api/…`: management and tools, master token only. It never
 * listens; `server.ts` puts it behind the queue domain's own router.
 */
export function createApp(ctx: ServerContext): express.Express {
  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);
  app.set('query parser', 'simple');
  // A route is a method and an exact path (decisions §4): `/API/V2/manifest` or `/api/v2/manifest/`
  // are unknown routes, not spellings of a known one.
  app.set('case sensitive routing', true);
  app.set('strict routing', true);

  // Preflights under /api/ get no special answer: they fall through to the wall (decisions §4).
  app.use(cors({ origin: '*', preflightContinue: true }));

  app.use((req: Request, _res: Response, next: NextFunction) => {
    const token = bearerToken(req);
    if (typeof token !== 'string' || !tokensEqual(token, ctx.masterToken)) return next(new NotFound());
    next();
  });

  // Any other version's path, whatever the method, once the token is good (interface §7).
  app.use((req: Request, res: Response, next: NextFunction) => {
    const version = /^\/api\/v(\d+)(?:\/|$)/.exec(req.path);
    // By its digits: `/api/v02/…` is not this version's path either.
    if (version && version[1] !== String(API_VERSION)) {
      return sendJson(res, 426, { error: `this server speaks /api/v${API_VERSION}`, api: API_VERSION });
    }
    next();
  });

  // Only the methods the tables list. Express would otherwise answer HEAD from a GET route and
  // OPTIONS with an `Allow` list, and both would tell a probe which routes exist. (A method that
  // some route takes, on a path where none does, falls through to the wall at the end.)
  app.use((req: Request, _res: Response, next: NextFunction) => {
    if (req.method !== 'GET' && req.method !== 'PUT' && req.method !== 'DELETE' && req.method !== 'POST') return next(new NotFound());
    next();
  });

  app.get('/api/version', (_req, res) => sendJson(res, 200, { api: API_VERSION }));

  app.use(`/api/v${API_VERSION}`, manageRouter(ctx));
  app.use(`/api/v${API_VERSION}`, toolsRouter(ctx));
  app.use(`/api/v${API_VERSION}`, operatorsRouter(ctx));

  app.use((_req: Request, _res: Response, next: NextFunction) => next(new NotFound()));
  // Express recognises an error handler by its four parameters.
  app.use((err: unknown, _req: Request, res: Response, _next: NextFunction) => sendError(res, err));
  return app;
}
