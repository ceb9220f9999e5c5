/**
 * The floor under a node on PostgreSQL: a node:http handler that reads the body, parses it, and
 * answers `{"ok":true}` only after a COMMIT that holds a row for it. Requests that arrive in one
 * turn of the event loop share a transaction (BEGIN, one multi-row INSERT, COMMIT, pipelined on
 * one connection), with at most two transactions at a time, as a svcq node folds its calls. It
 * does no queue work at all: several of them on one database show what several node processes
 * cost this machine before any queue work is done. argv[2]: `{"url":string}` (a database in
 * which the table `floor_rows` exists).
 */
import http from 'node:http';
import pg from 'pg';

const { url } = JSON.parse(process.argv[2] ?? '') as { url: string };
const pool = new pg.Pool({ connectionString: url, max: 4, pipeline: true } as pg.PoolConfig);
const CONCURRENT = 2;

let gathering: Array<{ body: string; answer: () => void }> = [];
let running = 0;
let scheduled = false;

function schedule(): void {
  if (scheduled || gathering.length === 0 || running >= CONCURRENT) return;
  scheduled = true;
  setImmediate(() => {
    scheduled = false;
    while (running < CONCURRENT && gathering.length > 0) {
      const group = gathering;
      gathering = [];
      running++;
      void fold(group).finally(() => {
        running--;
        schedule();
      });
    }
  });
}

async function fold(group: Array<{ body: string; answer: () => void }>): Promise<void> {
  const client = await pool.connect();
  try {
    const begun = client.query('BEGIN');
    const inserted = client.query({ name: 'floor_insert', text: 'INSERT INTO floor_rows (body) SELECT unnest($1::text[])' }, [group.map((g) => g.body)]);
    const committed = client.query('COMMIT');
    await Promise.all([begun, inserted, committed]);
  } finally {
    client.release();
  }
  for (const g of group) g.answer();
}

const server = http.createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.on('end', () => {
    const body = Buffer.concat(chunks).toString('utf8');
    JSON.parse(body);
    gathering.push({
      body,
      answer: () => {
        res.writeHead(200, { 'content-type': 'application/json; charset=utf-8', 'content-length': 11 });
        res.end('{"ok":true}');
      },
    });
    schedule();
  });
});
server.listen(0, '127.0.0.1', () => console.log(`listening on http://127.0.0.1:${(server.address() as { port: number }).port}`));
process.on('SIGTERM', () => {
  server.close();
  void pool.end().then(() => process.exit(0));
});
