import { Router } from 'express';
import type { ServerContext } from './context.js';

/** Read-only tools endpoints (interface §4.6): access logs, stats, task history, payloads. */
export function toolsRouter(_ctx: ServerContext): Router {
  return Router();
}
