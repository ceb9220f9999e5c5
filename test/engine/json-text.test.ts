import v8 from 'node:v8';
import vm from 'node:vm';
import { expect } from 'chai';
import fc from 'fast-check';
import { arrayElements, jsonString, nestedDeeperThan, objectMembers, ownText, unsureForSchema } from '../../src/json-text.js';

describe('jsonString', () => {
  it('writes exactly what JSON.stringify writes, whether or not the string needs escaping', () => {
    const samples = ['', 'GET', '/orders/items/0123456789abcdef/result', '127.0.0.1', '::ffff:127.0.0.1', 'worker 7', 'a"b', 'a\\b', 'tab\there', 'line\nbreak', '\u0000', '\u001f', '\u007f', 'é', 'ünïcödé', '日本', '\ud800', 'a\udfffb', '😀'];
    for (let c = 0; c < 0x250; c++) samples.push(`x${String.fromCharCode(c)}y`);
    for (const s of samples) expect(jsonString(s), JSON.stringify(s)).to.equal(JSON.stringify(s));
  });
});

describe('nestedDeeperThan', () => {
  it('counts nesting outside strings only, without recursion, at any depth (issue: valid JSON never gives a 500)', () => {
    expect(nestedDeeperThan('{"a":[1,{"b":2}]}', 3)).to.equal(false);
    expect(nestedDeeperThan('{"a":[1,{"b":2}]}', 2)).to.equal(true);
    expect(nestedDeeperThan('{"a":"[[[[[[\\"[[[["}', 1)).to.equal(false);
    expect(nestedDeeperThan('"\\\\"', 0)).to.equal(false);
    expect(nestedDeeperThan(`${'['.repeat(1_000_000)}${']'.repeat(1_000_000)}`, 64)).to.equal(true);
  });
});

describe('objectMembers and arrayElements (values kept as sent, interface §2.1)', () => {
  const texts = (text: string, spans: Array<{ start: number; end: number }>): string[] => spans.map((s) => text.slice(s.start, s.end));

  it('finds the exact value text of each member: numbers as written, strings with escapes and brackets, nested values, any spacing; the last of a repeated key', () => {
    const text = ' { "a" : 12345678901234567890 ,"b":"x\\"}]\\\\","c":{"d":[1,{"e":"]"}]},"n":null , "f":1.0,"a":1e2 } ';
    const members = objectMembers(text, 0);
    expect([...members.keys()]).to.deep.equal(['a', 'b', 'c', 'n', 'f']);
    expect(Object.fromEntries([...members].map(([k, s]) => [k, text.slice(s.start, s.end)]))).to.deep.equal({ a: '1e2', b: '"x\\"}]\\\\"', c: '{"d":[1,{"e":"]"}]}', n: 'null', f: '1.0' });
    // What the scan finds is what JSON.parse reads there.
    const parsed = JSON.parse(text) as Record<string, unknown>;
    for (const [k, s] of members) expect(JSON.parse(text.slice(s.start, s.end)), k).to.deep.equal(parsed[k]);
    expect(objectMembers('{}', 0).size).to.equal(0);
    // A key with escapes is read as JSON.parse reads it.
    expect([...objectMembers('{"d\\u006fne":[1],"\\"q":2}', 0).keys()]).to.deep.equal(['done', '"q']);
  });

  it('splits an array into its elements, each as written', () => {
    const text = '[ {"item":{"item":1}} , [1,2],"a,b",-0.5e-3,true ]';
    expect(texts(text, arrayElements(text, 0))).to.deep.equal(['{"item":{"item":1}}', '[1,2]', '"a,b"', '-0.5e-3', 'true']);
    expect(arrayElements('[ ]', 0)).to.deep.equal([]);
  });

  it('finds for any JSON the spans JSON.parse reads, whatever the spacing, with strings full of quotes and runs of backslashes', () => {
    const tricky = fc.array(fc.constantFrom('\\', '"', '\\\\', 'a', ']', '}', ',', 'é', '😀', '\n'), { maxLength: 12 }).map((parts) => parts.join(''));
    const value = fc.oneof(fc.jsonValue(), tricky, fc.dictionary(tricky, fc.jsonValue(), { maxKeys: 4 }), fc.array(tricky, { maxLength: 4 }));
    fc.assert(
      fc.property(fc.array(value, { maxLength: 8 }), fc.constantFrom(undefined, 1, 2, '\t'), (values, space) => {
        const text = JSON.stringify(values, null, space);
        const elements = arrayElements(text, 0);
        expect(elements.map((s) => JSON.parse(text.slice(s.start, s.end)) as unknown)).to.deep.equal(JSON.parse(text));
        const object = JSON.stringify(Object.fromEntries(values.map((v, n) => [`k${n}`, v])), null, space);
        const members = objectMembers(object, 0);
        expect(Object.fromEntries([...members].map(([k, s]) => [k, JSON.parse(object.slice(s.start, s.end)) as unknown]))).to.deep.equal(JSON.parse(object));
      }),
      { numRuns: 500 },
    );
  });

  describe('unsureForSchema: what a schema cannot vouch for (decisions §3.5)', () => {
    it('names a key given twice in an object, at any depth, by its JSON pointer', () => {
      expect(unsureForSchema('{"n":"str","n":5}')).to.deep.include({ path: '/n' });
      expect(unsureForSchema('{"a":[1,{"x":1,"y":2,"x":3}]}')).to.deep.include({ path: '/a/1/x' });
      expect(unsureForSchema('{"a/b":{"~":1,"~":2}}')).to.deep.include({ path: '/a~1b/~0' });
      // An escaped key is the same key as its plain spelling.
      expect(unsureForSchema('{"n":1,"\\u006e":2}')).to.deep.include({ path: '/n' });
      // The same key in two different objects is no duplicate.
      expect(unsureForSchema('{"a":{"n":1},"b":{"n":2},"n":[{"n":1},{"n":2}]}')).to.equal(undefined);
    });

    it('names a number past the range of a double, and nothing JSON.parse reads as finite', () => {
      expect(unsureForSchema('{"n":1e400}')).to.deep.include({ path: '/n' });
      expect(unsureForSchema('{"a":[-1E309]}')).to.deep.include({ path: '/a/0' });
      expect(unsureForSchema(`{"n":${'9'.repeat(400)}}`)).to.deep.include({ path: '/n' });
      expect(unsureForSchema('{"n":1e308,"m":-1.5e-400,"k":12345678901234567890,"t":true,"f":false,"z":null,"s":"1e400"}')).to.equal(undefined);
    });

    it('agrees with JSON.parse on random JSON: no finding for text JSON.stringify wrote', () => {
      fc.assert(
        fc.property(fc.jsonValue(), fc.constantFrom(undefined, 1, '\t'), (value, space) => {
          expect(unsureForSchema(JSON.stringify(value, null, space))).to.equal(undefined);
        }),
        { numRuns: 300 },
      );
    });
  });
});


describe('ownText (what the store keeps of a batch or a claim body)', () => {
  it('keeps none of the text it was cut from: items kept from 40 bodies of 1 MB hold a few KB, where slices held the 40 MB (soak test: a batch item kept its whole batch alive)', () => {
    v8.setFlagsFromString('--expose-gc');
    const gc = vm.runInNewContext('gc') as () => void;
    const heldBy = (cut: (text: string, span: { start: number; end: number }) => string): number => {
      gc();
      const before = process.memoryUsage().heapUsed;
      const kept: string[] = [];
      for (let n = 0; n < 40; n++) {
        // Made from bytes, as a request body is: a string of its own, not a constant.
        const body = Buffer.from(`[{"n":${n},"pad":"${'x'.repeat(1_000_000)}"},{"n":${n + 1},"kept":"a kept item"}]`).toString('utf8');
        const [, second] = arrayElements(body, 0);
        kept.push(cut(body, second!));
      }
      gc();
      const held = process.memoryUsage().heapUsed - before;
      expect(kept.map((k) => JSON.parse(k) as { n: number }).map((k) => k.n)).to.deep.equal(Array.from({ length: 40 }, (_, n) => n + 1));
      return held;
    };
    expect(heldBy((text, span) => text.slice(span.start, span.end)), 'slices: the check itself').to.be.above(30_000_000);
    expect(heldBy(ownText)).to.be.below(5_000_000);
  });
});
