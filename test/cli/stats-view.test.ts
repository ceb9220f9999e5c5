import { expect } from 'chai';
import type { Snapshot } from '../../src/tools/stats.js';
import { axisRange, chartOf, renderChart, type StatLine } from '../../src/cli/view/charts.js';
import { humanBytes } from '../../src/cli/view/format.js';
import { diskSummary, memorySummary, renderSnapshot } from '../../src/cli/view/panel.js';
import { runCli } from '../support/cli.js';
import { serverForSuite } from '../support/server.js';
import { eventually, today, tools } from '../tools/helpers.js';
import { withoutColour } from '../support/colour.js';

const MiB = 1024 ** 2;
const GiB = 1024 ** 3;

/** The y-axis labels of a rendered chart, top to bottom, as text. */
function axisLabels(chart: string): string[] {
  return chart
    .split('\n')
    .filter((line) => /[┤┼]/.test(line))
    .map((line) => line.split(/[┤┼]/)[0]!.trim());
}

/** How many rows of the plot the line touches. */
function rowsUsed(chart: string): number {
  return chart
    .split('\n')
    .filter((line) => /[┤┼]/.test(line))
    .filter((line) => /[─╭╮╰╯│]/.test(line.split(/[┤┼]/).slice(1).join(''))).length;
}

function parseBytes(label: string): number {
  const m = /^([\d.]+) (B|KiB|MiB|GiB|TiB)$/.exec(label);
  if (!m) throw new Error(`not a byte figure: ${label}`);
  return Number(m[1]) * 1024 ** ['B', 'KiB', 'MiB', 'GiB', 'TiB'].indexOf(m[2]!);
}

describe('stats figures and charts are consistent and readable at their scale', () => {
  withoutColour();

  it('disk percent is used / (used + free) like df, and the root reserve is named so the figures add up', () => {
    const disk = { path: '/', total: 252 * GiB, used: 23 * GiB, free: 79 * GiB };
    const summary = diskSummary(disk);
    expect(summary.fraction).to.be.closeTo(23 / 102, 1e-9);
    expect(summary.text).to.equal('23 GiB used, 79 GiB free (102 GiB usable of 252 GiB, 150 GiB reserved for root)');
    // No reserve: nothing to explain.
    expect(diskSummary({ path: '/', total: 100 * GiB, used: 25 * GiB, free: 75 * GiB })).to.deep.equal({ fraction: 0.25, text: '25 GiB used, 75 GiB free (of 100 GiB)' });
  });

  it('memory percent is used / total, and used and available add up to the total', () => {
    const summary = memorySummary({ total: 23 * GiB, used: 875 * MiB, available: 23 * GiB - 875 * MiB, free: 10 * GiB });
    expect(summary.fraction).to.be.closeTo(875 / (23 * 1024), 1e-9);
    expect(summary.text).to.equal('875 MiB used, 22 GiB available, of 23 GiB');
  });

  it('the stats now panel shows the df percent for the disk (22.5 %, not 9.1 %)', () => {
    const snapshot: Snapshot = {
      ts: 1_800_000_000,
      uptime: 3600,
      hostname: 'box',
      load: [0.1, 0.2, 0.3],
      cpu: null,
      memory: { total: 23 * GiB, used: 875 * MiB, available: 23 * GiB - 875 * MiB, free: 10 * GiB },
      disk: { path: '/', total: 252 * GiB, used: 23 * GiB, free: 79 * GiB },
      diskIo: null,
      netIo: null,
    };
    const panel = renderSnapshot(snapshot);
    const diskLine = panel.split('\n').find((l) => l.startsWith('disk /'))!;
    expect(diskLine).to.include(' 22.5 %');
    expect(diskLine).to.not.include('9.1 %');
    expect(panel.split('\n').find((l) => l.startsWith('memory'))).to.include('  3.7 %');
  });

  it('the memory chart scales its y axis to the data: 875 MiB used on a 23 GiB machine is a line, not a flat row at 0', () => {
    const lines: StatLine[] = Array.from({ length: 60 }, (_, i) => ({ ts: 1_800_000_000_000 + i * 15_000, total: 23 * GiB, used: (870 + 10 * Math.sin(i / 5)) * MiB, available: 22 * GiB, free: 10 * GiB }));
    const chart = chartOf('memory', lines);
    expect(chart.series.map((s) => s.label)).to.deep.equal(['used']);
    const text = renderChart(chart, 80);
    const labels = axisLabels(text).map(parseBytes);
    expect(Math.min(...labels)).to.be.greaterThan(800 * MiB);
    expect(Math.max(...labels)).to.be.lessThan(900 * MiB);
    expect(rowsUsed(text)).to.be.greaterThan(4);
    // Every axis label is different: enough decimals to tell the rows apart.
    expect(new Set(axisLabels(text)).size).to.equal(axisLabels(text).length);
    expect(text.split('\n')[0]).to.match(/^Memory used \(of 23 GiB\)\s+━━ used \d+ MiB \(3\.\d %\)$/);
  });

  it('the disk chart draws used space on its own range, its legend as a share of the usable space', () => {
    const lines: StatLine[] = Array.from({ length: 10 }, (_, i) => ({ ts: 1_800_000_000_000 + i * 15_000, path: '/', total: 252 * GiB, used: 22 * GiB + i * 50 * MiB, free: 79 * GiB - i * 50 * MiB }));
    const text = renderChart(chartOf('disk', lines), 80);
    const labels = axisLabels(text).map(parseBytes);
    expect(Math.min(...labels)).to.be.greaterThan(21 * GiB);
    expect(rowsUsed(text)).to.be.greaterThan(4);
    expect(text.split('\n')[0]).to.include('Disk / used (of 101 GiB usable)');
  });

  it('axisRange: rates and CPU start at 0; used memory and disk span their data, at least 2 % of the largest value', () => {
    expect(axisRange([5, 10], 'zero')).to.deep.equal({ min: 0, max: 10 });
    expect(axisRange([0, 0], 'zero')).to.deep.equal({ min: 0, max: 1 });
    expect(axisRange([800, 900], 'data')).to.deep.equal({ min: 800, max: 900 });
    const flat = axisRange([1000, 1000], 'data');
    expect(flat.max - flat.min).to.equal(20);
    expect(flat.min).to.equal(990);
    expect(humanBytes(1.5 * GiB, 0.05 * GiB)).to.equal('1.50 GiB');
    expect(humanBytes(22.41 * GiB, 0.06 * GiB)).to.equal('22.41 GiB');
    expect(humanBytes(875 * MiB)).to.equal('875 MiB');
  });

  describe('against a real server', () => {
    const server = serverForSuite({ args: ['--stats-interval', '200'] });
    const env = (): Record<string, string> => ({ SVCQ_URL: server.url, SVCQ_TOKEN: server.masterToken, NO_COLOR: '1' });

    it('stats now prints the disk percent as used / (used + free) of the snapshot', async () => {
      const json = await runCli(['stats', 'now', '--json'], { env: env() });
      const { disk } = JSON.parse(json.stdout) as Snapshot;
      if (!disk) return;
      const run = await runCli(['stats', 'now'], { env: env() });
      expect(run.code, run.stderr).to.equal(0);
      const line = run.stdout.split('\n').find((l) => l.startsWith('disk /'))!;
      const shown = Number(/([\d.]+) %/.exec(line)![1]);
      expect(shown).to.be.closeTo((100 * disk.used) / (disk.used + disk.free), 0.5);
      expect(line).to.include(`${humanBytes(disk.free)} free`);
    });

    it('stats show of a memory day-file draws used memory on the range of the samples, not from 0', async () => {
      const name = `memory-${today()}.log`;
      await eventually('three memory samples', async () => ((await tools(server, `stats/file?name=${name}`)).text.split('\n').length > 3 ? true : undefined));
      const run = await runCli(['stats', 'show', name], { env: env() });
      expect(run.code, run.stderr).to.equal(0);
      const labels = axisLabels(run.stdout).map(parseBytes);
      expect(Math.min(...labels)).to.be.greaterThan(0);
      expect(run.stdout).to.match(/^Memory used \(of /);
    });
  });
});
