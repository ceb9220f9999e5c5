import { expect } from 'chai';
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { StatsSampler, takeSnapshot, type Snapshot } from '../../src/tools/stats.js';
import { runCli } from '../support/cli.js';
import { cleanupTemp, startServer, tempDirEachTest, type TestServer } from '../support/server.js';
import { eventually, expectBadRequest, expectEmpty200, expectIntegers, today, tools } from './helpers.js';

interface StatList {
  interval: number;
  files: Array<{ name: string; type: string; date: string; size: number }>;
}

const TYPES = ['cpu', 'disk', 'diskio', 'memory', 'netio'];

function expectCores(cores: unknown, where: string): void {
  expect(cores, where).to.be.an('array').with.length.above(0);
  for (const core of cores as Array<Record<string, unknown>>) {
    expect(Object.keys(core).sort(), where).to.deep.equal(['idle', 'irq', 'nice', 'sys', 'user']);
    for (const v of Object.values(core)) expect(v, where).to.be.a('number').at.least(0);
  }
}

function expectNumbers(record: unknown, fields: string[], where: string): void {
  expect(record, where).to.be.an('object');
  for (const field of fields) expect((record as Record<string, unknown>)[field], `${where}.${field}`).to.be.a('number').at.least(0);
}

describe('server-health stats (interface §4.6, decisions §5)', () => {
  let server: TestServer;
  let started: number;
  before(async () => {
    started = Date.now();
    server = await startServer({ args: ['--stats-interval', '200'] });
  });
  after(async () => {
    await server.stop();
    cleanupTemp(server.root);
  });

  async function statList(): Promise<StatList> {
    const reply = await tools(server, 'stats');
    expect(reply.status).to.equal(200);
    return reply.json as StatList;
  }

  it('writes a first sample of cpu and memory when the server starts, each line { ts (ms), ...fields } (decisions §5)', async () => {
    const day = today();
    await eventually('cpu and memory day-files', async () => {
      const names = (await statList()).files.map((f) => f.name);
      return names.includes(`cpu-${day}.log`) && names.includes(`memory-${day}.log`) ? true : undefined;
    });
    const cpu = (await tools(server, `stats/file?name=cpu-${day}.log`)).text.split('\n').filter(Boolean).map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(Object.keys(cpu[0]!).sort()).to.deep.equal(['cores', 'model', 'ts']);
    expectIntegers(cpu[0]!, ['ts'], 'cpu line');
    expect(cpu[0]!.ts as number).to.be.within(started - 1000, Date.now());
    expect(cpu[0]!.model).to.be.a('string');
    expectCores(cpu[0]!.cores, 'cpu line');
    const memory = JSON.parse((await tools(server, `stats/file?name=memory-${day}.log`)).text.split('\n')[0]!) as Record<string, unknown>;
    expect(Object.keys(memory).sort()).to.deep.equal(['available', 'free', 'total', 'ts', 'used']);
    expectIntegers(memory, ['ts', 'total', 'used', 'available', 'free'], 'memory line');
  });

  it('keeps sampling every --stats-interval ms', async () => {
    const name = `cpu-${today()}.log`;
    await eventually('three cpu samples', async () => {
      const lines = (await tools(server, `stats/file?name=${name}`)).text.split('\n').filter(Boolean);
      return lines.length >= 3 ? true : undefined;
    });
  });

  it('lists { interval, files: [{ name, type, date, size }] } sorted by name (interface §4.6)', async () => {
    const list = await statList();
    expect(Object.keys(list).sort()).to.deep.equal(['files', 'interval']);
    expect(list.interval).to.equal(200);
    expect(list.files.map((f) => f.name)).to.deep.equal(list.files.map((f) => f.name).sort());
    for (const file of list.files) {
      expect(Object.keys(file).sort()).to.deep.equal(['date', 'name', 'size', 'type']);
      expect(TYPES).to.include(file.type);
      expect(file.date).to.match(/^\d{4}-\d{2}-\d{2}$/);
      expect(file.name).to.equal(`${file.type}-${file.date}.log`);
      expectIntegers(file, ['size'], file.name);
      expect(file.size).to.be.above(0);
    }
  });

  it('streams a day-file as octet-stream with Range: bytes=N- → 206, and past the end → empty 200 (interface §4.6)', async () => {
    const name = `memory-${today()}.log`;
    const full = await tools(server, `stats/file?name=${name}`);
    expect(full.status).to.equal(200);
    expect(full.headers['content-type']).to.equal('application/octet-stream');
    expect(full.headers['accept-ranges']).to.equal('bytes');
    const part = await tools(server, `stats/file?name=${name}`, { range: 'bytes=3-' });
    expect(part.status).to.equal(206);
    expect(String(part.headers['content-range'])).to.match(/^bytes 3-\d+\/\d+$/);
    expect(part.body.subarray(0, full.body.length - 3).equals(full.body.subarray(3))).to.equal(true);
    expectEmpty200(await tools(server, `stats/file?name=${name}`, { range: 'bytes=99999999-' }), 'past the end');
    const ignored = await tools(server, `stats/file?name=${name}`, { range: 'bytes=3-10' });
    expect(ignored.status).to.equal(200);
    expect(ignored.body.subarray(0, full.body.length).equals(full.body)).to.equal(true);
  });

  it('answers a well-formed name with no file with an empty 200 (decisions §5)', async () => {
    expectEmpty200(await tools(server, 'stats/file?name=cpu-1999-01-01.log'), 'old day');
    expectEmpty200(await tools(server, 'stats/file?name=netio-2999-12-31.log', { range: 'bytes=0-' }), 'future day');
  });

  it('rejects a malformed name with 400 { error }, traversal attempts included (decisions §5)', async () => {
    const day = today();
    const bad = [
      '',
      `..%2Fstats%2Fcpu-${day}.log`,
      `%2e%2e%2fcpu-${day}.log`,
      `../cpu-${day}.log`,
      '%2Fetc%2Fpasswd',
      `cpu-${day}.log%2F..`,
      `gpu-${day}.log`,
      'cpu-2026-1-1.log',
      `CPU-${day}.log`,
      `cpu-${day}.log.bak`,
      `tasks-${day}.log`,
      `cpu-${day}.log%00`,
    ];
    for (const name of bad) expectBadRequest(await tools(server, `stats/file?name=${name}`), `name=${name}`);
    expectBadRequest(await tools(server, 'stats/file'), 'no name');
    expectBadRequest(await tools(server, `stats/file?name=cpu-${day}.log&name=cpu-${day}.log`), 'name twice');
  });

  it('answers stats/now with exactly the fields, types and units of interface §4.6; what the host cannot report is null', async () => {
    const reply = await tools(server, 'stats/now');
    expect(reply.status).to.equal(200);
    const now = reply.json as Record<string, unknown>;
    expect(Object.keys(now).sort()).to.deep.equal(['cpu', 'disk', 'diskIo', 'hostname', 'load', 'memory', 'netIo', 'ts', 'uptime']);
    expectIntegers(now, ['ts', 'uptime'], 'now');
    expect(now.ts as number).to.be.within(Math.floor(Date.now() / 1000) - 5, Math.ceil(Date.now() / 1000) + 1);
    expect(now.uptime as number).to.be.above(0).and.below(Date.now() / 1000 / 2);
    expect(now.hostname).to.be.a('string').and.not.equal('');
    expect(now.load).to.be.an('array').with.length(3);
    for (const l of now.load as unknown[]) expect(l).to.be.a('number').at.least(0);
    const cpu = now.cpu as Record<string, unknown>;
    expect(Object.keys(cpu).sort()).to.deep.equal(['cores', 'model']);
    expect(cpu.model).to.be.a('string');
    expectCores(cpu.cores, 'cpu');
    expect(Object.keys(now.memory as object).sort()).to.deep.equal(['available', 'free', 'total', 'used']);
    expectNumbers(now.memory, ['total', 'used', 'available', 'free'], 'memory');
    if (now.disk !== null) {
      expect(Object.keys(now.disk as object).sort()).to.deep.equal(['free', 'path', 'total', 'used']);
      expect((now.disk as { path: unknown }).path).to.equal('/');
      expectNumbers(now.disk, ['total', 'used', 'free'], 'disk');
    }
    if (now.diskIo !== null) {
      expect(Object.keys(now.diskIo as object).sort()).to.deep.equal(['readBytes', 'writeBytes']);
      expectNumbers(now.diskIo, ['readBytes', 'writeBytes'], 'diskIo');
    }
    if (now.netIo !== null) {
      expect(Object.keys(now.netIo as object).sort()).to.deep.equal(['rxBytes', 'txBytes']);
      expectNumbers(now.netIo, ['rxBytes', 'txBytes'], 'netIo');
    }
  });
});

describe('serve --stats-interval 0 (docs/behaviour.md: a server that takes no samples still answers stats now)', () => {
  it('writes no day-file, not even the one a server writes as it starts, while stats now still answers; a stop waits for a sample under way, so the files are read after one', async () => {
    const stopped = async (interval: string): Promise<string[]> => {
      const server = await startServer({ args: ['--stats-interval', interval] });
      try {
        const now = await tools(server, 'stats/now');
        expect(now.status, `stats/now with --stats-interval ${interval}`).to.equal(200);
        expect((now.json as Snapshot).cpu, `stats/now with --stats-interval ${interval}`).to.be.an('object');
        expect(((await tools(server, 'stats')).json as StatList).interval).to.equal(Number(interval));
      } finally {
        await server.stop();
      }
      const dir = path.join(server.root, '_svcq', 'stats');
      const files = existsSync(dir) ? readdirSync(dir) : [];
      cleanupTemp(server.root);
      return files;
    };
    // The same steps with samples on: the first, taken at start, is on disk once the server has stopped.
    expect(await stopped('3600000'), 'day-files with --stats-interval 3600000').to.include(`cpu-${today()}.log`);
    expect(await stopped('0'), 'day-files with --stats-interval 0').to.deep.equal([]);
  });

  it('refuses an interval between 0 and 100 ms, naming the flag', async () => {
    const r = await runCli(['serve', '--root', path.join(os.tmpdir(), 'svcq-never-made'), '--stats-interval', '50']);
    expect(r.code).to.equal(2);
    expect(r.stderr).to.match(/--stats-interval/).and.to.match(/Expected 0 \(no samples\) or an integer greater than or equal to 100/).and.to.match(/received: 50/);
  });
});

describe('network counters (docs/behaviour.md: they sum the interfaces that have an address, loopback left out)', () => {
  /** The kernel's byte counters of those interfaces, summed (Linux: /sys/class/net). */
  function counters(): { rx: number; tx: number } | null {
    const names = Object.entries(os.networkInterfaces())
      .filter(([name, addresses]) => name !== 'lo' && (addresses ?? []).some((a) => !a.internal))
      .map(([name]) => name);
    if (names.length === 0 || !names.every((n) => existsSync(`/sys/class/net/${n}/statistics`))) return null;
    const read = (n: string, what: string): number => Number(readFileSync(`/sys/class/net/${n}/statistics/${what}`, 'utf8'));
    return { rx: names.reduce((sum, n) => sum + read(n, 'rx_bytes'), 0), tx: names.reduce((sum, n) => sum + read(n, 'tx_bytes'), 0) };
  }

  it("a snapshot's netIo lies between the kernel's counters read just before it and just after it", async function () {
    const before = counters();
    if (before === null) {
      console.log('      skipped: no interface with an address under /sys/class/net here');
      this.skip();
    }
    const { netIo } = await takeSnapshot();
    const after = counters()!;
    expect(netIo, 'netIo').to.not.equal(null);
    expect(netIo!.rxBytes).to.be.within(before.rx, after.rx);
    expect(netIo!.txBytes).to.be.within(before.tx, after.tx);
  });
});

describe('stats day-files with --stats-days (decisions §5: one day-file per type and UTC day; an operator may cap how many days stay)', () => {
  let dir: string;
  tempDirEachTest((made) => (dir = made), 'svcq-stats-days-');

  const names = (): string[] => readdirSync(dir).sort();
  const snapshot = async (): Promise<Snapshot> => takeSnapshot();

  it('counts days by UTC date: with N = 3 on 2026-01-09, 2026-01-06 and later stay, 2026-01-05 and earlier go; other files stay', async () => {
    for (const d of ['2026-01-04', '2026-01-05', '2026-01-06', '2026-01-09']) {
      writeFileSync(path.join(dir, `cpu-${d}.log`), '{}\n');
      writeFileSync(path.join(dir, `memory-${d}.log`), '{}\n');
    }
    writeFileSync(path.join(dir, 'notes.txt'), 'kept\n');
    const sampler = new StatsSampler(dir, 0, () => undefined, snapshot, 3);
    expect(await sampler.prune(Date.parse('2026-01-09T23:59:59Z'))).to.deep.equal(['cpu-2026-01-04.log', 'cpu-2026-01-05.log', 'memory-2026-01-04.log', 'memory-2026-01-05.log']);
    expect(names()).to.deep.equal(['cpu-2026-01-06.log', 'cpu-2026-01-09.log', 'memory-2026-01-06.log', 'memory-2026-01-09.log', 'notes.txt']);
    // 0 keeps every one.
    expect(await new StatsSampler(dir, 0, () => undefined, snapshot, 0).prune(Date.parse('2030-01-01T00:00:00Z'))).to.deep.equal([]);
    expect(names()).to.have.length(5);
  });

  it('removes the day-files of days past N at the first sample, and keeps today\'s', async () => {
    writeFileSync(path.join(dir, 'cpu-2020-01-01.log'), '{}\n');
    writeFileSync(path.join(dir, 'netio-2020-01-02.log'), '{}\n');
    const sampler = new StatsSampler(dir, 60_000, () => undefined, snapshot, 2);
    sampler.start();
    try {
      const left = await eventually('the old day-files removed and today\'s written', () => {
        const now = names();
        return now.some((n) => n.includes('2020-')) || !now.includes(`cpu-${today()}.log`) ? undefined : now;
      });
      expect(left.filter((n) => n.includes('2020-'))).to.deep.equal([]);
    } finally {
      await sampler.stop();
    }
  });
});
