import type { ServerResponse } from 'node:http';
import { closeUnlessBodyRead } from './unread-body.js';

/**
 * The wall (interface §5.3, decisions §4): every denied or unknown request gets exactly this
 * response, whatever was asked and whatever headers an earlier layer had set, so that a probe
 * learns nothing from status, headers or body.
 */
const BODY = Buffer.from('{"error":"not found"}');
const HEADERS = {
  'content-type': 'application/json; charset=utf-8',
  'content-length': String(BODY.length),
  'access-control-allow-origin': '*',
};

export function sendWall(res: ServerResponse): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  for (const name of res.getHeaderNames()) res.removeHeader(name);
  closeUnlessBodyRead(res);
  res.writeHead(404, HEADERS);
  res.end(BODY);
}

/**
 * The wall as the raw bytes {@link sendWall} writes for a connection's last answer, for a request
 * Node's parser gave up on before there was a response to write it into.
 */
export function wallAndClose(): string {
  let head = 'HTTP/1.1 404 Not Found\r\n';
  for (const [name, value] of Object.entries(HEADERS)) head += `${name}: ${value}\r\n`;
  return `${head}Date: ${new Date().toUTCString()}\r\nConnection: close\r\n\r\n${BODY.toString('latin1')}`;
}
