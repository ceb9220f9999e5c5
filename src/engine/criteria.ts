/**
 * Claim criteria (interface §4.3, decisions §3.3). Matching fails closed: a missing field, an
 * unknown operator, an operator object with several keys or an operand of the wrong type makes
 * the criterion fail; it is never an error.
 */
export type Criteria = Record<string, unknown>;

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

const OPERATORS = new Set(['eq', 'ne', 'lt', 'lte', 'gt', 'gte', 'in']);

/** True when `item` (a parsed JSON object) passes every criterion. */
export function matches(item: Record<string, unknown>, criteria: Criteria): boolean {
  try {
    for (const field in criteria) {
      if (!Object.prototype.hasOwnProperty.call(item, field)) return false;
      if (!passes(item[field] as Json, criteria[field] as Json)) return false;
    }
    return true;
  } catch {
    // Values nested too deep to compare (the stack runs out) fail closed, like any other criterion that cannot pass.
    return false;
  }
}

function passes(value: Json, matcher: Json): boolean {
  if (matcher === null || typeof matcher !== 'object' || Array.isArray(matcher)) return deepEqual(value, matcher);
  const keys = Object.keys(matcher);
  if (keys.length !== 1) return false;
  const op = keys[0]!;
  if (!OPERATORS.has(op)) return false;
  const operand = matcher[op] as Json;
  switch (op) {
    case 'eq':
      return deepEqual(value, operand);
    case 'ne':
      return !deepEqual(value, operand);
    case 'in': {
      if (!Array.isArray(operand)) return false;
      const { scalars, composites } = candidatesOf(operand);
      return value !== null && typeof value === 'object' ? composites.some((candidate) => deepEqual(value, candidate)) : scalars.has(value);
    }
    default:
      return compare(op, value, operand);
  }
}

/**
 * An `in` operand split once into a set of its scalars (looked up at once: a claim compares every
 * pending item with the same operand, and a long one made each comparison as long) and a list of
 * its arrays and objects (compared one by one). A Set tells 1 from "1" as deepEqual does, and
 * JSON has no NaN; 0 and -0 are the same to both.
 */
const operandCandidates = new WeakMap<Json[], { scalars: Set<Json>; composites: Json[] }>();

function candidatesOf(operand: Json[]): { scalars: Set<Json>; composites: Json[] } {
  let found = operandCandidates.get(operand);
  if (!found) {
    found = { scalars: new Set(), composites: [] };
    for (const candidate of operand) {
      if (candidate !== null && typeof candidate === 'object') found.composites.push(candidate);
      else found.scalars.add(candidate);
    }
    operandCandidates.set(operand, found);
  }
  return found;
}

function compare(op: string, a: Json, b: Json): boolean {
  const comparable = (typeof a === 'number' && typeof b === 'number') || (typeof a === 'string' && typeof b === 'string');
  if (!comparable) return false;
  // Strings compare by UTF-16 code unit order, which is what JavaScript's < does.
  switch (op) {
    case 'lt':
      return a < b;
    case 'lte':
      return a <= b;
    case 'gt':
      return a > b;
    default:
      return a >= b;
  }
}

/** Same JSON type and value; arrays and objects compared element by element. */
export function deepEqual(a: Json, b: Json): boolean {
  if (a === b) return true;
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  if (Array.isArray(a)) {
    const other = b as Json[];
    return a.length === other.length && a.every((x, i) => deepEqual(x, other[i]!));
  }
  const bo = b as Record<string, Json>;
  const ka = Object.keys(a);
  if (ka.length !== Object.keys(bo).length) return false;
  return ka.every((k) => Object.prototype.hasOwnProperty.call(bo, k) && deepEqual(a[k]!, bo[k]!));
}
