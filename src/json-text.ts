/** Characters a JSON string cannot hold as they are (and anything past ASCII, to be safe). */
// eslint-disable-next-line no-control-regex -- control characters are exactly what must be escaped
const NEEDS_ESCAPE = /["\\\u0000-\u001f\u007f-\uffff]/;

/**
 * A string as JSON text, as JSON.stringify writes it. Records and log lines are built by hand on
 * every request, and the strings in them (a worker's name, a host, a path) rarely need escaping:
 * those are quoted as they are, without the call into JSON.stringify.
 */
export function jsonString(s: string): string {
  return NEEDS_ESCAPE.test(s) ? JSON.stringify(s) : `"${s}"`;
}
