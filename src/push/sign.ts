import { createHmac, timingSafeEqual } from 'node:crypto';

/**
 * decisions §9.1: the signature headers of a push delivery or a callback made for a queue with a
 * `secret`. The receiver recomputes `HMAC-SHA256(secret, "<timestamp>.<body>")` over the exact
 * bytes it received and compares; the timestamp is signed too, so that a receiver can refuse an
 * old request replayed.
 */
export interface SignatureHeaders {
  'svcq-timestamp': string;
  'svcq-signature': string;
}

/** The hex HMAC-SHA256 of `"<timestamp>.<body>"` under `secret`. */
export function signatureOf(secret: string, timestamp: string, body: string | Buffer): string {
  const hmac = createHmac('sha256', secret);
  hmac.update(`${timestamp}.`);
  hmac.update(body);
  return hmac.digest('hex');
}

/** The headers that sign `body` at `nowMs` (milliseconds since the epoch; the header holds whole seconds). */
export function sign(secret: string, body: string | Buffer, nowMs: number): SignatureHeaders {
  const timestamp = String(Math.floor(nowMs / 1000));
  return { 'svcq-timestamp': timestamp, 'svcq-signature': `v1=${signatureOf(secret, timestamp, body)}` };
}

/**
 * Whether `signature` (the `svcq-signature` header) signs `body` at `timestamp` under `secret`, in
 * constant time. For receivers written in TypeScript and for the tests; it does not judge the
 * timestamp's age, which is the receiver's policy.
 */
export function verify(secret: string, body: string | Buffer, timestamp: string, signature: string): boolean {
  const expected = Buffer.from(`v1=${signatureOf(secret, timestamp, body)}`);
  const given = Buffer.from(signature);
  return given.length === expected.length && timingSafeEqual(given, expected);
}
