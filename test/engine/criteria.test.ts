import { expect } from 'chai';
import fc from 'fast-check';
import { deepEqual, matches } from '../../src/engine/criteria.js';

describe('criteria matching (interface §4.3, decisions §3.3)', () => {
  const item = { n: 5, s: 'm', b: true, z: null, arr: [1, { x: 2 }], obj: { k: 1 } };

  it('`in` matches exactly when some candidate is deep-equal to the value, with its scalars looked up in a set (fast-check)', () => {
    // Small values, so that the value is often among the candidates; 0 and -0, 1 and "1", arrays and objects among them.
    const small = fc.letrec((tie) => ({
      value: fc.oneof({ depthSize: 'small' }, fc.constantFrom(0, -0, 1, 2, '1', '', 'a', true, false, null), fc.array(tie('value'), { maxLength: 2 }), fc.dictionary(fc.constantFrom('a', 'b'), tie('value'), { maxKeys: 2 })),
    })).value as fc.Arbitrary<Parameters<typeof deepEqual>[0]>;
    fc.assert(
      fc.property(small, fc.array(small, { maxLength: 8 }), (value, operand) => {
        const expected = operand.some((candidate) => deepEqual(value, candidate));
        expect(matches({ f: value }, { f: { in: operand } })).to.equal(expected);
        // The same operand again (its split is kept): the same answer.
        expect(matches({ f: value }, { f: { in: operand } })).to.equal(expected);
      }),
      { numRuns: 2000 },
    );
  });

  it('a bare primitive matches by strict equality of JSON type and value', () => {
    expect(matches(item, { n: 5 })).to.equal(true);
    expect(matches(item, { n: '5' })).to.equal(false);
    expect(matches(item, { b: true, z: null })).to.equal(true);
    expect(matches(item, { b: 1 })).to.equal(false);
  });

  it('a bare array matches by deep equality', () => {
    expect(matches(item, { arr: [1, { x: 2 }] })).to.equal(true);
    expect(matches(item, { arr: [1, { x: 3 }] })).to.equal(false);
    expect(matches(item, { arr: [1] })).to.equal(false);
  });

  it('eq is bare equality, also for objects; ne needs the field present and different', () => {
    expect(matches(item, { obj: { eq: { k: 1 } } })).to.equal(true);
    expect(matches(item, { n: { eq: 6 } })).to.equal(false);
    expect(matches(item, { n: { ne: 6 } })).to.equal(true);
    expect(matches(item, { n: { ne: 5 } })).to.equal(false);
    expect(matches(item, { missing: { ne: 1 } })).to.equal(false);
  });

  it('lt lte gt gte compare two numbers', () => {
    expect(matches(item, { n: { lt: 6 } })).to.equal(true);
    expect(matches(item, { n: { lt: 5 } })).to.equal(false);
    expect(matches(item, { n: { lte: 5 } })).to.equal(true);
    expect(matches(item, { n: { gt: 4 } })).to.equal(true);
    expect(matches(item, { n: { gt: 5 } })).to.equal(false);
    expect(matches(item, { n: { gte: 5 } })).to.equal(true);
  });

  it('lt lte gt gte compare two strings by code unit order', () => {
    expect(matches(item, { s: { lt: 'n' } })).to.equal(true);
    expect(matches(item, { s: { gt: 'M' } })).to.equal(true); // 'm' (0x6d) > 'M' (0x4d)
    expect(matches(item, { s: { gte: 'm', } })).to.equal(true);
    expect(matches(item, { s: { lte: 'l' } })).to.equal(false);
  });

  it('comparisons of mixed or non-comparable types fail closed', () => {
    expect(matches(item, { n: { lt: '9' } })).to.equal(false);
    expect(matches(item, { s: { gt: 1 } })).to.equal(false);
    expect(matches(item, { b: { gte: false } })).to.equal(false);
    expect(matches(item, { z: { lt: 1 } })).to.equal(false);
  });

  it('in needs an array and matches strict-equal membership', () => {
    expect(matches(item, { n: { in: [1, 5] } })).to.equal(true);
    expect(matches(item, { n: { in: ['5'] } })).to.equal(false);
    expect(matches(item, { n: { in: 5 } })).to.equal(false);
    expect(matches(item, { arr: { in: [[1, { x: 2 }]] } })).to.equal(true);
  });

  it('a missing field, an unknown operator or several keys fail closed', () => {
    expect(matches(item, { nope: 1 })).to.equal(false);
    expect(matches(item, { n: { between: [1, 9] } })).to.equal(false);
    expect(matches(item, { n: { gt: 1, lt: 9 } })).to.equal(false);
    expect(matches(item, { n: {} })).to.equal(false);
  });

  it('every criterion must pass; no criteria matches everything', () => {
    expect(matches(item, { n: 5, s: 'x' })).to.equal(false);
    expect(matches(item, { n: 5, s: 'm' })).to.equal(true);
    expect(matches(item, {})).to.equal(true);
  });

  it('inherited properties are not item fields', () => {
    expect(matches(item, { toString: { ne: 1 } })).to.equal(false);
  });

  it('values nested too deep to compare fail closed instead of throwing', () => {
    const nest = (): unknown => {
      let deep: unknown = 1;
      for (let i = 0; i < 200_000; i++) deep = [deep];
      return deep;
    };
    // Two separate structures, so that comparing them has to walk all the way down.
    expect(matches({ x: nest() }, { x: nest() })).to.equal(false);
    expect(matches({ x: nest() }, { x: { in: [nest()] } })).to.equal(false);
  });
});
