import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { expect } from 'chai';
import { fencedBlocks } from './doc-blocks.js';
import { REPO } from '../support/server.js';

/**
 * The documents as a reader finds them: a README short enough to read through, and no link in
 * the repository's Markdown that leads nowhere, so that moving a section cannot leave a dead one.
 */
const DOCS = path.join(REPO, 'docs');
const PAGES = [
  'README.md',
  'examples/README.md',
  'bench/README.md',
  ...readdirSync(DOCS, { recursive: true, encoding: 'utf8' })
    .filter((f) => f.endsWith('.md'))
    .map((f) => path.join('docs', f)),
].sort();

/** The tags of the marked blocks that tests run (test/examples.test.ts, test/scaling-doc.test.ts, test/client/library.test.ts, test/push/push-doc.test.ts, test/push/callbacks.test.ts). */
const RUN_TAGS = ['readme', 'walkthrough', 'http', 'browsers', 'operators', 'reference', 'behaviour', 'scaling', 'nginx', 'client', 'scheduling', 'retries', 'flow', 'push', 'callbacks'];

/** The text a reader sees outside code: fenced blocks and inline code spans blanked out. */
function prose(markdown: string): string {
  return markdown.replace(/^```[\s\S]*?^```$/gm, '').replace(/`[^`\n]*`/g, '``');
}

/** Every `[text](target)` link of a Markdown text, outside code. */
function links(markdown: string): string[] {
  return [...prose(markdown).matchAll(/\]\(([^)\s]+)\)/g)].map((m) => m[1]!);
}

/** The anchors GitHub gives a page's headings: the rendered text lowercased, punctuation dropped, spaces as hyphens; a repeated one gets -1, -2, … */
function anchors(markdown: string): Set<string> {
  const seen = new Map<string, number>();
  const out = new Set<string>();
  for (const m of markdown.replace(/^```[\s\S]*?^```$/gm, '').matchAll(/^#{1,6} +(.+?) *#*$/gm)) {
    const text = m[1]!.replace(/\[([^\]]*)\]\([^)]*\)/g, '$1').replace(/[`*]/g, '');
    const slug = text.toLowerCase().replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, '').replaceAll(' ', '-');
    const n = seen.get(slug) ?? 0;
    seen.set(slug, n + 1);
    out.add(n === 0 ? slug : `${slug}-${n}`);
  }
  return out;
}

describe('the documentation: a short README, and no link that leads nowhere', () => {
  it('README.md has at most 300 lines: what a user needs first, the rest is under docs/', () => {
    const lines = readFileSync(path.join(REPO, 'README.md'), 'utf8').split('\n').length;
    expect(lines).to.be.at.most(300);
  });

  it('every relative link of README.md, examples/, bench/ and docs/ names a file that exists, and every #anchor a heading of the page it names', () => {
    const dead: string[] = [];
    for (const page of PAGES) {
      const text = readFileSync(path.join(REPO, page), 'utf8');
      for (const link of links(text)) {
        if (/^[a-z][a-z0-9+.-]*:/i.test(link)) continue; // https:, mailto:
        const [target, anchor] = link.split('#') as [string, string | undefined];
        const file = target === '' ? path.join(REPO, page) : path.resolve(path.dirname(path.join(REPO, page)), decodeURIComponent(target));
        if (!file.startsWith(REPO + path.sep) || !existsSync(file)) {
          dead.push(`${page}: ${link} (no such file)`);
          continue;
        }
        if (anchor === undefined) continue;
        if (!file.endsWith('.md') || statSync(file).isDirectory()) {
          dead.push(`${page}: ${link} (an anchor into something that is not a Markdown page)`);
          continue;
        }
        if (!anchors(readFileSync(file, 'utf8')).has(anchor)) dead.push(`${page}: ${link} (no such heading)`);
      }
    }
    expect(dead).to.deep.equal([]);
  });

  it('README.md links every page under docs/', () => {
    const linked = new Set(links(readFileSync(path.join(REPO, 'README.md'), 'utf8')).map((l) => path.normalize(l.split('#')[0]!)));
    const pages = PAGES.filter((p) => p.startsWith('docs' + path.sep));
    expect(pages.filter((p) => !linked.has(p))).to.deep.equal([]);
  });

  it('every code block that calls curl is marked to run, with the tag of a test that runs it (STYLE: examples are executable and tested)', () => {
    const unrun: string[] = [];
    for (const page of PAGES) {
      for (const b of fencedBlocks(readFileSync(path.join(REPO, page), 'utf8'))) {
        if (!b.code.includes('curl ')) continue;
        const [tag, kind] = (b.marked ?? '').split(': ');
        if (!RUN_TAGS.includes(tag!) || kind !== 'run') unrun.push(`${page}: ${b.marked ?? 'unmarked'}\n${b.code}`);
      }
    }
    expect(unrun).to.deep.equal([]);
  });

  it('finds the links and anchors a reader would follow (the checks above can fail)', () => {
    const page = '# Top\n\n## `svcq queues`, `svcq queue HOST/NAME`\n\n## What one primary carries (measured here)\n\n## Top\n\nSee [a](x.md#top-1) and `[not](code.md)`.\n\n```\n[nor](block.md)\n```\n';
    expect([...anchors(page)]).to.deep.equal(['top', 'svcq-queues-svcq-queue-hostname', 'what-one-primary-carries-measured-here', 'top-1']);
    expect(links(page)).to.deep.equal(['x.md#top-1']);
  });
});
