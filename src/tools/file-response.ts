import { open } from 'node:fs/promises';
import type { ServerResponse } from 'node:http';
import { pipeline } from 'node:stream/promises';

/**
 * The start offset of a `Range: bytes=N-` header, or undefined for no header or any other form:
 * only the open-ended form is honoured, everything else is ignored (decisions §5).
 */
export function rangeStart(header: string | undefined): number | undefined {
  if (header === undefined) return undefined;
  const m = /^bytes=(\d+)-$/.exec(header.trim());
  // However many digits: an offset past any file's end (even past 2^53) still gives the empty 200.
  return m ? Number(m[1]) : undefined;
}

/**
 * Streams a tools file (interface §4.6): raw bytes as `application/octet-stream` with
 * `accept-ranges: bytes` (`none`, and `start` left out, for a file always served whole). With a start offset inside the file: 206 and `content-range:
 * bytes N-LAST/SIZE`. An absent file, or an offset at or past the end: an empty 200, never an
 * error. The file is opened before it is measured, so a log rotated meanwhile is read whole
 * under its old identity rather than half from each.
 */
export async function sendToolFile(res: ServerResponse, file: string, start?: number, ranges = true): Promise<void> {
  let handle;
  try {
    handle = await open(file, 'r');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ENOTDIR' || code === 'EISDIR') return sendEmpty(res, ranges);
    throw err;
  }
  let streaming = false;
  try {
    const info = await handle.stat();
    if (!info.isFile()) return sendEmpty(res, ranges);
    // The length is fixed at what the file held now: bytes appended while streaming wait for the next request.
    const size = info.size;
    const from = start ?? 0;
    if (from >= size) return sendEmpty(res, ranges);
    const headers: Record<string, string | number> = {
      'content-type': 'application/octet-stream',
      'accept-ranges': ranges ? 'bytes' : 'none',
      'content-length': size - from,
      'access-control-allow-origin': '*',
    };
    if (start !== undefined) headers['content-range'] = `bytes ${from}-${size - 1}/${size}`;
    res.writeHead(start !== undefined ? 206 : 200, headers);
    streaming = true;
    // The stream owns the handle from here on and closes it when done.
    await pipeline(handle.createReadStream({ start: from, end: size - 1 }), res);
  } catch (err) {
    // Once bytes are on the wire there is no status left to send: cut the connection instead.
    if (streaming) res.destroy();
    else throw err;
  } finally {
    if (!streaming) await handle.close();
  }
}

/**
 * The empty 200 that stands for an absent file or a range with nothing left in it. `ranges`
 * false says `accept-ranges: none`, for what is always served whole (archived payloads).
 */
export function sendEmpty(res: ServerResponse, ranges = true): void {
  res.writeHead(200, {
    'content-type': 'application/octet-stream',
    'accept-ranges': ranges ? 'bytes' : 'none',
    'content-length': 0,
    'access-control-allow-origin': '*',
  });
  res.end();
}
