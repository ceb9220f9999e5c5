import { parse, stringify } from 'lossless-json';
import { answerText } from '../client/client.js';

/**
 * JSON that keeps every number as its text: items, progress, results and errors are the bytes
 * their sender wrote (the server stores and answers them unchanged), and a command that prints
 * one must not round 12345678901234567890 or turn `1.0` into `1` as `JSON.parse` would.
 */

/** The client's answer read again from the text the server sent, numbers exact. */
export function exactAnswer<T extends object>(answer: T): T {
  const text = answerText(answer);
  return text === undefined ? answer : (parse(text) as T);
}

/** JSON text of `value`, exact numbers as they were read; undefined stays undefined, as with JSON.stringify. */
export function exactJson(value: unknown, indent?: number): string | undefined {
  return stringify(value, undefined, indent);
}

/** Parses JSON text with its numbers exact (see {@link exactAnswer}). */
export function parseExact(text: string): unknown {
  return parse(text);
}
