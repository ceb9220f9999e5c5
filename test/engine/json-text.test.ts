import { expect } from 'chai';
import { jsonString, nestedDeeperThan } from '../../src/json-text.js';

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
