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

/** Where a value lies in a JSON text: `text.slice(start, end)` is its exact text. */
export interface Span {
  start: number;
  end: number;
}

/**
 * The text of a span as a string of its own, for keeping. V8 makes a slice longer than 12
 * characters a view of the whole string it was cut from: an item cut from a batch of 1,000 would
 * keep the whole batch's text alive for as long as it waits. (Appending a character and cutting it
 * off again makes V8 copy the characters into a new string, which the slice then views.)
 */
export function ownText(text: string, span: Span): string {
  return `${text.slice(span.start, span.end)} `.slice(0, -1);
}

/**
 * The members of the object that starts at `at` in `text` (valid JSON, already parsed once), each
 * key with the span of its value; a key given twice keeps its last value, as JSON.parse does. A
 * flat scan, not a parse: the values are found, not read. Used where a value must keep the exact
 * text it was sent as (interface §2.1: items, results and errors as posted), which JSON.parse and
 * JSON.stringify would change (integers past 2^53, `1.0`, `1e2`).
 */
export function objectMembers(text: string, at: number): Map<string, Span> {
  const members = new Map<string, Span>();
  let i = skipSpace(text, at) + 1;
  i = skipSpace(text, i);
  if (text.charCodeAt(i) === 0x7d) return members;
  for (;;) {
    i = skipSpace(text, i);
    const keyEnd = skipString(text, i);
    const key = keyOf(text, i, keyEnd);
    const start = skipSpace(text, skipSpace(text, keyEnd) + 1);
    const end = skipValue(text, start);
    members.set(key, { start, end });
    i = skipSpace(text, end);
    if (text.charCodeAt(i++) !== 0x2c) return members;
  }
}

/** The spans of the elements of the array that starts at `at` in `text` (valid JSON), in order. */
export function arrayElements(text: string, at: number): Span[] {
  const elements: Span[] = [];
  let i = skipSpace(text, skipSpace(text, at) + 1);
  if (text.charCodeAt(i) === 0x5d) return elements;
  for (;;) {
    const start = skipSpace(text, i);
    const end = skipValue(text, start);
    elements.push({ start, end });
    i = skipSpace(text, end);
    if (text.charCodeAt(i++) !== 0x2c) return elements;
  }
}

/**
 * What keeps `text` (valid JSON, already parsed once) from being checked against a schema as
 * every reader would read it: an object that names a key twice (JSON.parse keeps the last value,
 * other readers the first or neither) or a number past the range of a double (JSON.parse makes it
 * Infinity, which passes `type: integer`). The JSON pointer of the first such value, and why; one
 * pass over the text.
 */
export function unsureForSchema(text: string): { path: string; message: string } | undefined {
  const keys: string[] = [];
  let found: { path: string; message: string } | undefined;
  const pointer = (): string => keys.map((k) => `/${pointerPart(k)}`).join('');
  const value = (i: number): number => {
    i = skipSpace(text, i);
    const c = text.charCodeAt(i);
    if (c === 0x22) return skipString(text, i);
    if (c === 0x7b || c === 0x5b) {
      const object = c === 0x7b;
      const seen = object ? new Set<string>() : undefined;
      i = skipSpace(text, i + 1);
      if (text.charCodeAt(i) === (object ? 0x7d : 0x5d)) return i + 1;
      for (let n = 0; ; n++) {
        let key = String(n);
        if (object) {
          i = skipSpace(text, i);
          const keyEnd = skipString(text, i);
          key = keyOf(text, i, keyEnd);
          if (seen!.has(key) && found === undefined) {
            keys.push(key);
            found = { path: pointer(), message: 'is given twice in one object: readers differ on which value counts, so the schema cannot vouch for it' };
            keys.pop();
          }
          seen!.add(key);
          i = skipSpace(text, keyEnd) + 1;
        }
        keys.push(key);
        i = skipSpace(text, value(i));
        keys.pop();
        if (text.charCodeAt(i++) !== 0x2c) return i;
      }
    }
    // A number, true, false or null: up to the next delimiter.
    const start = i;
    let exponent = false;
    for (; i < text.length; i++) {
      const d = text.charCodeAt(i);
      if (d === 0x2c || d === 0x7d || d === 0x5d || d === 0x20 || d === 0x0a || d === 0x0d || d === 0x09) break;
      if (d === 0x65 || d === 0x45) exponent = true;
    }
    // Without an exponent only more than 308 digits pass the largest double.
    const number = c === 0x2d || (c >= 0x30 && c <= 0x39);
    if (number && (exponent || i - start > 308) && found === undefined && !Number.isFinite(Number(text.slice(start, i)))) {
      found = { path: pointer() || '/', message: 'is a number too large for a double (it reads as Infinity), which the schema cannot check' };
    }
    return i;
  };
  value(0);
  return found;
}

/** The key whose string spans `start` (its opening quote) to `end` (past its closing quote). */
function keyOf(text: string, start: number, end: number): string {
  const raw = text.slice(start + 1, end - 1);
  // A key without escapes is its own text; only one with a backslash needs decoding.
  return raw.includes('\\') ? (JSON.parse(text.slice(start, end)) as string) : raw;
}

/** A property name as one step of a JSON pointer (RFC 6901: ~ as ~0, / as ~1). */
export function pointerPart(name: string): string {
  return name.replace(/~/g, '~0').replace(/\//g, '~1');
}

function skipSpace(text: string, i: number): number {
  for (;;) {
    const c = text.charCodeAt(i);
    if (c !== 0x20 && c !== 0x0a && c !== 0x0d && c !== 0x09) return i;
    i++;
  }
}

/**
 * Past the string that starts at `i` (its opening quote). Each quote after it is found with
 * indexOf (a native search, several times faster than a loop over the characters); it closes the
 * string unless an odd number of backslashes stands right before it.
 */
function skipString(text: string, i: number): number {
  for (;;) {
    const quote = text.indexOf('"', i + 1);
    if (quote === -1) return text.length; // not JSON: the callers parse their text first
    let backslashes = 0;
    while (text.charCodeAt(quote - 1 - backslashes) === 0x5c) backslashes++;
    if (backslashes % 2 === 0) return quote + 1;
    i = quote;
  }
}

/** Past the value that starts at `i`. */
function skipValue(text: string, i: number): number {
  const c = text.charCodeAt(i);
  if (c === 0x22) return skipString(text, i);
  if (c === 0x7b || c === 0x5b) {
    let depth = 0;
    do {
      const d = text.charCodeAt(i);
      if (d === 0x22) {
        i = skipString(text, i);
        continue;
      }
      if (d === 0x7b || d === 0x5b) depth++;
      else if (d === 0x7d || d === 0x5d) depth--;
      i++;
    } while (depth > 0);
    return i;
  }
  // A number, true, false or null: up to the next delimiter.
  while (i < text.length) {
    const d = text.charCodeAt(i);
    if (d === 0x2c || d === 0x7d || d === 0x5d || d === 0x20 || d === 0x0a || d === 0x0d || d === 0x09) break;
    i++;
  }
  return i;
}
