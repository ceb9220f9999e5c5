import http from 'node:http';
import { checkAnswer } from './openapi-check.js';

export interface Reply {
  status: number;
  headers: http.IncomingHttpHeaders;
  /** Header lines as sent, in order (for byte-for-byte comparisons). */
  rawHeaders: string[];
  text: string;
  body: Buffer;
  /** The body parsed as JSON, or undefined when it is not JSON. */
  json: unknown;
}

export interface RequestOptions {
  method?: string;
  headers?: Record<string, string>;
  body?: string | Buffer;
  /** Host header (queue domain). */
  host?: string;
  token?: string;
  /**
   * Take the answer as it comes. Without this, an answer that is not one docs/openapi.yaml gives
   * for the request (an undescribed status, a body of another shape) fails the request: for
   * requests to something that is not a svcq server.
   */
  unchecked?: boolean;
}

/** One raw HTTP request, no keep-alive. The answer is checked against docs/openapi.yaml (see `unchecked`), and otherwise not interpreted. */
export function request(baseUrl: string, path: string, options: RequestOptions = {}): Promise<Reply> {
  const base = new URL(baseUrl);
  const headers: Record<string, string> = { ...options.headers };
  if (options.host) headers.host = options.host;
  if (options.token) headers.authorization = `Bearer ${options.token}`;
  if (options.body !== undefined) {
    headers['content-type'] ??= 'application/json';
    headers['content-length'] = String(Buffer.byteLength(options.body));
  }
  return new Promise((resolve, reject) => {
    const req = http.request({ hostname: base.hostname, port: base.port, path, method: options.method ?? 'GET', headers, agent: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        const body = Buffer.concat(chunks);
        const text = body.toString('utf8');
        let json: unknown;
        try {
          json = JSON.parse(text);
        } catch {
          json = undefined;
        }
        const reply = { status: res.statusCode ?? 0, headers: res.headers, rawHeaders: res.rawHeaders, text, body, json };
        try {
          if (!options.unchecked) checkAnswer({ method: options.method ?? 'GET', target: path, status: reply.status, headers: reply.headers, body });
        } catch (err) {
          reject(err as Error);
          return;
        }
        resolve(reply);
      });
    });
    req.on('error', reject);
    req.end(options.body);
  });
}

/** Headers of a reply without the ones that change with time or connection (Date, Connection, Keep-Alive). */
export function stableHeaders(reply: Reply): string[] {
  const out: string[] = [];
  for (let i = 0; i < reply.rawHeaders.length; i += 2) {
    const name = reply.rawHeaders[i]!.toLowerCase();
    if (name === 'date' || name === 'connection' || name === 'keep-alive') continue;
    out.push(`${reply.rawHeaders[i]}: ${reply.rawHeaders[i + 1]}`);
  }
  return out;
}
