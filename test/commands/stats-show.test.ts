import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { expect } from 'chai';
import { runCli } from '../support/cli.js';

/**
 * `svcq stats show TYPE` means the newest day-file of that type the server lists: the one it is
 * writing, dated by its own clock's UTC day, never a date worked out from this machine's clock.
 */
describe('svcq stats show TYPE: the newest day-file of that type the server lists (interface §4.6)', () => {
  // Dates no clock here reads today: only the server's list can have named them.
  const files = [
    { name: 'cpu-2031-05-01.log', type: 'cpu', date: '2031-05-01', size: 40 },
    { name: 'cpu-2031-05-02.log', type: 'cpu', date: '2031-05-02', size: 40 },
    { name: 'memory-2031-05-01.log', type: 'memory', date: '2031-05-01', size: 40 },
  ];
  const asked: string[] = [];
  let server: http.Server;
  let url: string;

  before(async () => {
    server = http.createServer((req, res) => {
      const at = new URL(req.url ?? '/', 'http://x');
      if (at.pathname === '/api/v2/stats') return res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ interval: 15000, files }));
      if (at.pathname === '/api/v2/stats/file') {
        const name = at.searchParams.get('name') ?? '';
        asked.push(name);
        return res.writeHead(200, { 'content-type': 'application/octet-stream' }).end(`{"ts":1,"file":"${name}"}\n`);
      }
      res.writeHead(404, { 'content-type': 'application/json' }).end('{"error":"not found"}');
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  after(() => server.close());
  beforeEach(() => (asked.length = 0));

  it('svcq stats show cpu reads the newest cpu file the server lists, whatever the date here', async () => {
    const run = await runCli(['stats', 'show', 'cpu', '--json', '--url', url, '--token', 't']);
    expect(run.code, run.stderr).to.equal(0);
    expect(asked).to.deep.equal(['cpu-2031-05-02.log']);
    expect(JSON.parse(run.stdout)).to.deep.equal([{ ts: 1, file: 'cpu-2031-05-02.log' }]);
    // Drawn as a chart, the same file.
    const chart = await runCli(['stats', 'show', 'memory', '--url', url, '--token', 't'], { env: { NO_COLOR: '1' } });
    expect(chart.code, chart.stderr).to.equal(0);
    expect(asked).to.deep.equal(['cpu-2031-05-02.log', 'memory-2031-05-01.log']);
  });

  it('a file name is read as it is named, even when a newer one is listed', async () => {
    const run = await runCli(['stats', 'show', 'cpu-2031-05-01.log', '--json', '--url', url, '--token', 't']);
    expect(run.code, run.stderr).to.equal(0);
    expect(asked).to.deep.equal(['cpu-2031-05-01.log']);
  });

  it('a type the server has no file of yet is one sentence and exit 1; a word that is neither a name nor a type is a usage error naming both forms', async () => {
    const none = await runCli(['stats', 'show', 'netio', '--url', url, '--token', 't']);
    expect(none.code).to.equal(1);
    expect(none.stderr).to.equal('svcq: the server lists no netio day-file yet (svcq stats lists those it has)\n');
    expect(asked).to.deep.equal([]);
    const neither = await runCli(['stats', 'show', 'cpu-today', '--url', url, '--token', 't']);
    expect(neither.code).to.equal(2);
    expect(neither.stderr).to.equal('svcq: "cpu-today" is neither a stats day-file name (<type>-YYYY-MM-DD.log, as svcq stats lists them) nor a type alone (cpu, memory, disk, diskio, netio: its newest day-file)\n');
  });

  it('its help says what a type alone means: the newest file, on the server\'s UTC day, not always today where you are', async () => {
    const help = await runCli(['stats', 'show', '--help'], { env: { COLUMNS: '400' } });
    const text = help.stdout.replace(/\s+/g, ' ');
    expect(text).to.include('a type alone (cpu, memory, disk, diskio or netio), which means the newest file of that type the server lists');
    expect(text).to.include("on its own clock's UTC day. That is not always today's date where you are");
  });
});
