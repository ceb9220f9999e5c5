/** An error as a command prints it with --json (decisions §1.2): `{ "error": sentence }`, one line. */
export function jsonErrorLine(sentence: string): string {
  return JSON.stringify({ error: sentence });
}
