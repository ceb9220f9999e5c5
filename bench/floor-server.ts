/**
 * The floor under any server built on node:http here: a handler that reads the body, parses it and
 * answers `{"ok":true}`, and nothing else. With `durable` set, each answer waits for a group write
 * of a 200-byte record per request to a file opened with O_DSYNC and zero-filled ahead (one write
 * at a time, the next group gathering meanwhile), as svcq's journal does. The bench drives it with
 * the same load generator, so the gap between the two figures is what an fsynced acknowledgement
 * costs before any queue work is done. argv[2]: `{"durable":bool,"dir":string}`.
 */
import { constants, fdatasyncSync, openSync, write, writeSync } from 'node:fs';
import http from 'node:http';
import path from 'node:path';

const { durable, dir } = JSON.parse(process.argv[2] ?? '') as { durable: boolean; dir: string };
const fd = openSync(path.join(dir, 'floor.log'), constants.O_WRONLY | constants.O_CREAT | constants.O_TRUNC | constants.O_DSYNC);
const RECORD = 'x'.repeat(199) + '\n';
if (durable) {
  // Zero-filled ahead, as svcq keeps its journal, so that a write changes no file size: the floor
  // must not pay a cost the server under test has removed. 256 MiB outlasts every floor phase.
  const zeros = Buffer.alloc(1 << 20);
  for (let i = 0; i < 256; i++) writeSync(fd, zeros, 0, zeros.length, i * zeros.length);
  fdatasyncSync(fd);
}

let gathering: Array<() => void> = [];
let writing = false;
let offset = 0;

function flush(): void {
  if (writing || gathering.length === 0) return;
  writing = true;
  const group = gathering;
  gathering = [];
  const data = Buffer.from(RECORD.repeat(group.length));
  const at = offset;
  offset += data.length;
  write(fd, data, 0, data.length, at, (err) => {
    if (err) throw err;
    writing = false;
    for (const answer of group) answer();
    flush();
  });
}

const server = http.createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.on('end', () => {
    JSON.parse(Buffer.concat(chunks).toString('utf8'));
    const answer = (): void => {
      res.writeHead(200, { 'content-type': 'application/json; charset=utf-8', 'content-length': 11 });
      res.end('{"ok":true}');
    };
    if (!durable) return answer();
    gathering.push(answer);
    if (gathering.length === 1) setImmediate(flush);
  });
});
server.listen(0, '127.0.0.1', () => console.log(`listening on http://127.0.0.1:${(server.address() as { port: number }).port}`));
process.on('SIGTERM', () => process.exit(0));
