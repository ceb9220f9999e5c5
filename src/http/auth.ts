import { createHash, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';

/** The bearer token of a request, undefined when none was sent, null when the header is malformed. */
export function bearerToken(req: IncomingMessage): string | undefined | null {
  const header = req.headers.authorization;
  if (header === undefined) return undefined;
  const match = /^Bearer ([^\s]+)$/i.exec(header);
  return match ? match[1]! : null;
}

/** Compares two tokens in constant time by comparing their sha256 digests, so lengths leak nothing. */
export function tokensEqual(given: string, expected: string): boolean {
  const a = createHash('sha256').update(given).digest();
  const b = createHash('sha256').update(expected).digest();
  return timingSafeEqual(a, b);
}

/** The Host header lowercased with its port dropped (decisions §2.1), and a trailing dot. */
export function requestHost(req: IncomingMessage): string {
  const raw = (req.headers.host ?? '').toLowerCase();
  if (raw.startsWith('[')) return raw.slice(0, raw.indexOf(']') + 1);
  const colon = raw.indexOf(':');
  const name = colon === -1 ? raw : raw.slice(0, colon);
  // `jobs.example.com.` is the same name written in full (the root's empty label after the dot).
  return name.endsWith('.') ? name.slice(0, -1) : name;
}
