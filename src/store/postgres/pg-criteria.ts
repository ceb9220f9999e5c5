/**
 * What PostgreSQL checks of a claim's criteria (decisions §3.3) before the application does. The
 * application's `matches()` stays the one definition of matching: the database only narrows the
 * rows it reads, with conditions every matching item meets, so it never drops an item that
 * matches and FIFO among matching items holds. Two such conditions keep exactly the semantics:
 *
 * - every criterion's field is present (`?&`): a missing field fails any criterion;
 * - a string, `true`, `false` or `null` required by bare or `eq` equality is there, as that JSON
 *   type (`@>`; jsonb compares such scalars byte for byte after unescaping, as `===` does after
 *   `JSON.parse`, and keeps the last of duplicate keys as `JSON.parse` does).
 *
 * Numbers are left to the application (jsonb keeps every digit, JavaScript rounds to a double:
 * `1.0000000000000001` equals `1` in one and not the other), and so are `ne`, `lt`–`gte` (jsonb
 * orders strings by collation, decisions §3.3 by UTF-16 code units), `in`, arrays and objects.
 *
 * Field names and strings of the criteria that PostgreSQL cannot hold (a NUL, a lone surrogate)
 * are left to the application too.
 *
 * A body is read as jsonb only where that cannot fail or differ: one with a `\u` escape (jsonb
 * refuses `\u0000` and a lone surrogate), an exponent of four digits or more, or longer than
 * {@link MAX_JSONB_BODY} bytes (deep nesting; numbers with more digits than `numeric`
 * holds) passes to the application unchecked.
 */

/** Exponents in a body's text that jsonb's `numeric` may refuse (four digits or more: a PostgreSQL regular expression). */
export const UNSAFE_EXPONENT = '[eE][+-]?[0-9]{4}';

/** Bodies of more bytes than this are not read as jsonb (deep nesting, numbers past what `numeric` holds). */
export const MAX_JSONB_BODY = 15_000;

/**
 * The condition on `body` a claim's page query adds, for {@link prefilterOf}'s parameters
 * `$5`–`$8`: a body jsonb might refuse passes; any other must hold the required scalars and
 * every field. (The presence test is left out when the scalars name every field.)
 */
export const PREFILTER_SQL = `CASE WHEN octet_length(body) > $6 OR strpos(body, '\\u') > 0 OR body ~ $5 THEN true
            WHEN $8::text[] IS NULL THEN body::jsonb @> $7::jsonb
            ELSE body::jsonb @> $7::jsonb AND body::jsonb ?& $8::text[] END`;

/** The parameters of {@link PREFILTER_SQL}: the safety tests, the required scalars (jsonb text) and the fields. */
export function prefilterOf(criteria: Record<string, unknown>): [string, number, string, string[] | null] {
  const required: Record<string, unknown> = Object.create(null) as Record<string, unknown>;
  const fields: string[] = [];
  for (const field in criteria) {
    // A name jsonb cannot hold is checked by the application alone.
    if (!storable(field)) continue;
    fields.push(field);
    const matcher = criteria[field];
    const wanted = isScalar(matcher) ? matcher : onlyEq(matcher);
    if (wanted !== undefined && (typeof wanted !== 'string' || storable(wanted))) required[field] = wanted;
  }
  // Presence is tested apart only for fields without a required scalar.
  const presence = fields.some((f) => !Object.prototype.hasOwnProperty.call(required, f)) ? fields : null;
  return [UNSAFE_EXPONENT, MAX_JSONB_BODY, JSON.stringify(required), presence];
}

/**
 * Whether a string of the criteria can go to PostgreSQL as it is: text holds no NUL, and a lone
 * surrogate has no UTF-8 form (it would arrive as U+FFFD, another string).
 */
function storable(text: string): boolean {
  return !text.includes('\u0000') && !/\p{Cs}/u.test(text);
}

/** A string, a boolean or null: compared by jsonb exactly as decisions §3.3 compares them. */
function isScalar(value: unknown): value is string | boolean | null {
  return value === null || typeof value === 'string' || typeof value === 'boolean';
}

/** The operand of `{ eq: <string | boolean | null> }`; undefined for any other matcher. */
function onlyEq(matcher: unknown): string | boolean | null | undefined {
  if (typeof matcher !== 'object' || matcher === null || Array.isArray(matcher)) return undefined;
  const keys = Object.keys(matcher);
  if (keys.length !== 1 || keys[0] !== 'eq') return undefined;
  const operand = (matcher as Record<string, unknown>).eq;
  return isScalar(operand) ? operand : undefined;
}
