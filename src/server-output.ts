import { writeSync } from 'node:fs';

/**
 * Writes a line of the server's own (a warning, an internal error) to stderr, or drops it when it
 * cannot be written. A server outlives its output: stderr redirected to a file on the disk that has
 * just filled (the moment it has most to say), or a reader that went away, must not end it. The line
 * goes to the descriptor itself, not through `process.stderr`: that stream is destroyed by its first
 * failed write, which would silence every later line even once the disk has room again (and in the
 * main thread it ends the process, see {@link keepOutputErrorsQuiet}).
 */
export function stderrLine(text: string): void {
  const bytes = Buffer.from(text.endsWith('\n') ? text : `${text}\n`);
  try {
    for (let at = 0; at < bytes.length; ) at += writeSync(2, bytes, at);
  } catch {
    // Nowhere left to say it.
  }
}

/**
 * A failed write to stdout or stderr (ENOSPC, EPIPE) is an `error` event, which ends the process
 * when nothing listens for it, and oclif listens on stdout only to throw it again (all but EPIPE).
 * From here on `onError` hears of it instead (once per stream), and the process carries on.
 */
export function keepOutputErrorsQuiet(onError: (err: Error) => void = () => undefined): void {
  for (const stream of [process.stdout, process.stderr]) {
    stream.removeAllListeners('error');
    stream.on('error', onError);
  }
}
