/**
 * Summarises a V8 `.cpuprofile` (from `node --cpu-prof`): where the samples landed by function
 * (self time), by area (svcq file, npm package, node internals, GC, idle) and which svcq functions
 * hold the most time with what they call (inclusive).
 *
 *   node --import tsx bench/profile-summary.ts <file.cpuprofile> [topN] [fromMs] [toMs]
 *
 * fromMs/toMs keep only the samples in that window, in ms from the start of the profile (the bench
 * uses it to leave out the server's start-up and warm-up).
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

interface CallFrame {
  functionName: string;
  url: string;
  lineNumber: number;
  columnNumber: number;
}

interface ProfileNode {
  id: number;
  callFrame: CallFrame;
  children?: number[];
}

interface CpuProfile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

const REPO_URL = `file://${path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')}/`;

/** A short, stable location: repo-relative file, npm package path, or node internal module. */
function where(frame: CallFrame): string {
  if (!frame.url) return '';
  let url = frame.url.startsWith(REPO_URL) ? frame.url.slice(REPO_URL.length) : frame.url.replace(/^file:\/\//, '');
  const dist = url.indexOf('/dist/');
  if (isSvcq(frame.url) && dist >= 0) url = url.slice(dist + 1);
  const nm = url.lastIndexOf('node_modules/');
  if (nm >= 0) url = url.slice(nm);
  return `${url}:${frame.lineNumber + 1}`;
}

/** The bucket a frame's self time is reported under. */
function area(frame: CallFrame): string {
  const name = frame.functionName;
  if (name === '(garbage collector)') return 'GC';
  if (name === '(idle)') return 'idle (waiting for I/O)';
  if (name === '(program)') return '(program: native, not attributed)';
  if (!frame.url) return 'V8 / native builtins';
  const url = frame.url;
  const nm = url.lastIndexOf('node_modules/');
  if (nm >= 0) {
    const rest = url.slice(nm + 'node_modules/'.length).split('/');
    return `npm ${rest[0]!.startsWith('@') ? `${rest[0]}/${rest[1]}` : rest[0]}`;
  }
  if (url.startsWith('node:')) {
    const mod = url.slice(5).replace(/^internal\//, '');
    return `node ${mod.split('/').slice(0, 2).join('/').replace(/\.js$/, '')}`;
  }
  if (isSvcq(url)) return `svcq ${url.slice(url.indexOf('/dist/') >= 0 ? url.indexOf('/dist/') + 6 : REPO_URL.length)}`;
  return url;
}

const label = (frame: CallFrame): string => `${frame.functionName || '(anonymous)'} ${where(frame)}`.trim();

function table(title: string, entries: [string, number][], total: number, top: number): string {
  const lines = [title];
  for (const [name, us] of entries.sort((a, b) => b[1] - a[1]).slice(0, top)) {
    lines.push(`  ${(us / 1000).toFixed(0).padStart(7)} ms ${((100 * us) / total).toFixed(1).padStart(5)}%  ${name}`);
  }
  return lines.join('\n');
}

export interface Window {
  fromMs: number;
  toMs: number;
}

// The bench runs a copy of the build from a temp folder, so svcq's own code is recognised by its dist/ path.
const isSvcq = (url: string): boolean => url.startsWith('file://') && !url.includes('/node_modules/') && (url.startsWith(REPO_URL) || /\/dist\/(src|commands)\//.test(url));

/** A printable summary of the profile at `file`, `top` rows per list, optionally only a time window. */
export function summariseProfile(file: string, top = 25, window?: Window): string {
  const profile = JSON.parse(readFileSync(file, 'utf8')) as CpuProfile;
  const byId = new Map<number, ProfileNode>();
  const parent = new Map<number, number>();
  for (const node of profile.nodes) byId.set(node.id, node);
  for (const node of profile.nodes) for (const child of node.children ?? []) parent.set(child, node.id);

  // A sample's time is the gap to the next sample.
  const selfByNode = new Map<number, number>();
  let total = 0;
  let at = 0;
  for (let i = 0; i < profile.samples.length; i++) {
    at += profile.timeDeltas[i] ?? 0;
    if (window && (at < window.fromMs * 1000 || at > window.toMs * 1000)) continue;
    const dt = profile.timeDeltas[i + 1] ?? 0;
    const id = profile.samples[i]!;
    selfByNode.set(id, (selfByNode.get(id) ?? 0) + dt);
    total += dt;
  }

  const selfByFunction = new Map<string, number>();
  const selfByArea = new Map<string, number>();
  const inclusiveSvcq = new Map<string, number>();
  let idle = 0;
  for (const [id, us] of selfByNode) {
    const frame = byId.get(id)!.callFrame;
    if (frame.functionName === '(idle)') idle += us;
    const key = label(frame);
    selfByFunction.set(key, (selfByFunction.get(key) ?? 0) + us);
    const a = area(frame);
    selfByArea.set(a, (selfByArea.get(a) ?? 0) + us);
    // Inclusive time of svcq's own functions: each counted once per stack, recursion or not.
    const seen = new Set<string>();
    for (let up: number | undefined = id; up !== undefined; up = parent.get(up)) {
      const f = byId.get(up)!.callFrame;
      if (!isSvcq(f.url)) continue;
      const k = label(f);
      if (seen.has(k)) continue;
      seen.add(k);
      inclusiveSvcq.set(k, (inclusiveSvcq.get(k) ?? 0) + us);
    }
  }
  const busy = total - idle;
  const span = window ? ` (window ${(window.fromMs / 1000).toFixed(1)}–${(window.toMs / 1000).toFixed(1)} s)` : '';
  const head = `sampled ${(total / 1000).toFixed(0)} ms${span}, busy ${(busy / 1000).toFixed(0)} ms (${((100 * busy) / total).toFixed(0)}%); percentages are of busy time`;
  selfByFunction.forEach((_, k) => k.startsWith('(idle)') && selfByFunction.delete(k));
  selfByArea.delete('idle (waiting for I/O)');
  return [
    head,
    table(`self time by function (top ${top})`, [...selfByFunction], busy, top),
    table('self time by area', [...selfByArea], busy, 20),
    table('svcq functions, inclusive (self + callees)', [...inclusiveSvcq], busy, 15),
  ].join('\n\n');
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const file = process.argv[2];
  if (!file) {
    console.error('usage: node --import tsx bench/profile-summary.ts <file.cpuprofile> [topN]');
    process.exit(2);
  }
  const [, , , top, from, to] = process.argv;
  console.log(summariseProfile(file, Number(top ?? 25), from !== undefined ? { fromMs: Number(from), toMs: Number(to ?? Infinity) } : undefined));
}
