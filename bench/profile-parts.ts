/**
 * Splits a server's `.cpuprofile` into the parts of a request (the table "The cost of one post" in
 * docs/performance.md): each sample goes to the innermost frame of its stack that lies in a source
 * module of svcq (or of a package bundled with it) and that module's part, so that node's own work
 * called from svcq code (a socket write from the journal, say) counts for the part that asked for
 * it. Samples with no such frame are node's HTTP parsing, timers, GC and the event loop.
 *
 *   node --import tsx bench/profile-parts.ts <file.cpuprofile> [posts:µsPerPost] [fromMs] [toMs]
 *
 * The bundle in dist/ marks each module it holds with a `// src/…` comment: that is how a line of
 * it is traced to its module. With `posts` (posts answered in the window), each part is also
 * given in µs of the profiled thread per post.
 */
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

interface CallFrame {
  functionName: string;
  url: string;
  lineNumber: number;
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

/** Module → part; the first pattern that matches wins. */
const PARTS: Array<[RegExp, string]> = [
  [/^src\/tools\/access-log\.ts$/, 'access-log line'],
  [/^src\/operators\//, 'metrics and rates'],
  [/^src\/tools\/(task-events|files)\.ts$/, 'task history (day-files)'],
  [/^src\/store\/(journal|append-file)\.ts$|^src\/durable-files\.ts$/, 'journal write'],
  [/^src\/store\/embedded-store\.ts$/, 'store: records, events, commit'],
  [/^src\/store\/postgres\//, 'store: PostgreSQL statements'],
  [/^node_modules\/(pg|pg-protocol|pg-pool|pg-types|pgpass|postgres-\w+)\//, 'store: PostgreSQL driver'],
  [/^src\/(engine\/(queue|item|deadline-heap|criteria)|waiting\/)/, 'queue engine'],
  [/^src\/(http\/(auth|wall)|definitions\/|engine\/config)/, 'access decision'],
  [/^src\/http\/errors\.ts$/, 'answer (headers, body)'],
  [/^src\/http\/(queue-router|unread-body|server)\.ts$|^node_modules\/find-my-way\/|^src\/(json-text|engine\/rules)\.ts$/, 'routing, body, parse'],
];

/** The functions of server.ts that make the access-log entry and count the request. */
const LOGGING = new Set(['log', 'logFinished', 'logAbandoned']);

const moduleMaps = new Map<string, Array<[number, string]>>();
/** The module a line of a bundled file belongs to (by the `// src/…` markers), or undefined. */
function moduleOf(frame: CallFrame): string | undefined {
  const url = frame.url;
  if (!url.startsWith('file://')) return undefined;
  let marks = moduleMaps.get(url);
  if (!marks) {
    marks = [];
    const file = fileURLToPath(url);
    if (existsSync(file)) {
      readFileSync(file, 'utf8')
        .split('\n')
        .forEach((line, n) => {
          const m = /^\/\/ ((?:src|node_modules)\/\S+)$/.exec(line);
          if (m) marks!.push([n, m[1]!]);
        });
    }
    moduleMaps.set(url, marks);
  }
  let found: string | undefined;
  for (const [line, mod] of marks) {
    if (line > frame.lineNumber) break;
    found = mod;
  }
  return found;
}

function partOf(frame: CallFrame): string | undefined {
  const mod = moduleOf(frame);
  if (mod === undefined) return undefined;
  if (mod === 'src/http/server.ts' && LOGGING.has(frame.functionName)) return 'access-log line';
  for (const [pattern, part] of PARTS) if (pattern.test(mod)) return part;
  return `other svcq (${mod})`;
}

function nodePart(frame: CallFrame): string {
  const name = frame.functionName;
  if (name === '(garbage collector)') return 'node: GC';
  if (name === '(idle)') return 'idle';
  if (frame.url.startsWith('node:internal/http') || /^node:_http|^node:internal\/(streams|stream_base)|^node:net/.test(frame.url)) return 'node: HTTP, streams, sockets';
  return 'node: event loop, timers, promises, other';
}

export function profileParts(file: string, window?: { fromMs: number; toMs: number }): { busy: number; parts: Map<string, number> } {
  const profile = JSON.parse(readFileSync(file, 'utf8')) as CpuProfile;
  const byId = new Map<number, ProfileNode>();
  const parent = new Map<number, number>();
  for (const node of profile.nodes) byId.set(node.id, node);
  for (const node of profile.nodes) for (const child of node.children ?? []) parent.set(child, node.id);
  const partOfNode = new Map<number, string>();
  const resolve = (id: number): string => {
    const known = partOfNode.get(id);
    if (known) return known;
    let part: string | undefined;
    for (let up: number | undefined = id; up !== undefined && part === undefined; up = parent.get(up)) part = partOf(byId.get(up)!.callFrame);
    part ??= nodePart(byId.get(id)!.callFrame);
    partOfNode.set(id, part);
    return part;
  };
  const parts = new Map<string, number>();
  let at = 0;
  let busy = 0;
  for (let i = 0; i < profile.samples.length; i++) {
    at += profile.timeDeltas[i] ?? 0;
    if (window && (at < window.fromMs * 1000 || at > window.toMs * 1000)) continue;
    // Each sample counts once, whatever the gap to the next: on a busy machine a thread taken off
    // its core leaves a long gap, which says nothing of the CPU the frame under it used.
    const dt = 1;
    const part = resolve(profile.samples[i]!);
    if (part === 'idle') continue;
    parts.set(part, (parts.get(part) ?? 0) + dt);
    busy += dt;
  }
  return { busy, parts };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const [, , file, posts, from, to] = process.argv;
  if (!file) throw new Error('usage: profile-parts.ts <file.cpuprofile> [posts] [fromMs] [toMs]');
  const { busy, parts } = profileParts(file, from !== undefined ? { fromMs: Number(from), toMs: Number(to ?? Infinity) } : undefined);
  // With `posts`, the second argument may be the server's CPU µs per post (posts:µs): each part's share of it.
  const [n, usPerPost] = (posts ?? '0').split(':').map(Number) as [number, number | undefined];
  console.log(`${busy} busy samples${n ? ` over ${n} posts` : ''}`);
  for (const [part, count] of [...parts].sort((a, b) => b[1] - a[1])) {
    const share = count / busy;
    console.log(`${part.padEnd(48)} ${(100 * share).toFixed(1).padStart(5)}%${usPerPost ? `  ${(share * usPerPost).toFixed(1).padStart(7)} µs/post` : ''}`);
  }
}
