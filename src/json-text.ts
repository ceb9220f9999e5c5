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

/**
 * True when JSON text nests arrays and objects more than `limit` levels deep. A scan of the text
 * with a counter, never a recursion, so it is safe on any input: it guards the code that does walk
 * a value recursively (a schema validator, a serialiser), which would run out of stack on a body
 * nested tens of thousands deep and turn valid JSON into a 500.
 */
export function nestedDeeperThan(text: string, limit: number): boolean {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c) i++; // a backslash: the next character is escaped
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) {
      inString = true;
    } else if (c === 0x5b || c === 0x7b) {
      if (++depth > limit) return true;
    } else if (c === 0x5d || c === 0x7d) {
      depth--;
    }
  }
  return false;
}
