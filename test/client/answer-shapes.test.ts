import { expect } from 'chai';
import fc from 'fast-check';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { ANSWER_SHAPES, answerMismatch, shapeMismatches, type AnswerShape, type Shape } from '../../src/client/answer-shapes.js';

/**
 * Answers that fit `shape`, with noise: now and then a value anywhere is any JSON instead, or an
 * object lacks the properties it must have. Most are near misses, at every depth.
 */
function answers(shape: Shape): fc.Arbitrary<unknown> {
  return fc.oneof({ weight: 12, arbitrary: fitting(shape) }, { weight: 1, arbitrary: fc.jsonValue({ maxDepth: 2 }) });
}

function fitting(shape: Shape): fc.Arbitrary<unknown> {
  if (shape.const !== undefined) return fc.constant(shape.const);
  if (shape.anyOf) return fc.oneof(...shape.anyOf.map(answers));
  if (shape.allOf) return fc.tuple(...shape.allOf.map(answers)).map((parts) => (parts.every((p) => typeof p === 'object' && p !== null && !Array.isArray(p)) ? Object.assign({}, ...parts) : parts[0]));
  switch (shape.type) {
    case 'integer':
      return fc.integer();
    case 'number':
      return fc.oneof(fc.integer(), fc.double({ noNaN: true, noDefaultInfinity: true }));
    case 'string':
      return fc.string({ maxLength: 4 });
    case 'boolean':
      return fc.boolean();
    case 'null':
      return fc.constant(null);
    case 'array':
      return fc.array(shape.items ? answers(shape.items) : fc.jsonValue({ maxDepth: 1 }), { maxLength: 3 });
    case 'object': {
      const extra = shape.additionalProperties ? fc.dictionary(fc.string({ maxLength: 3 }), answers(shape.additionalProperties), { maxKeys: 3 }) : fc.constant({});
      if (!shape.properties) return extra;
      const properties = Object.fromEntries(Object.entries(shape.properties).map(([k, s]) => [k, answers(s)]));
      const record = fc.oneof({ weight: 8, arbitrary: fc.record(properties, { requiredKeys: shape.required ?? [] }) }, { weight: 1, arbitrary: fc.record(properties, { requiredKeys: [] }) });
      return fc.tuple(extra, record).map(([e, r]) => ({ ...e, ...r }));
    }
    default:
      return fc.jsonValue({ maxDepth: 2 });
  }
}

describe("the client's check of answer shapes (what ajv, the JSON Schema validator, reports of the same schemas)", () => {
  const ajv = new Ajv2020({ allErrors: false, strict: false });

  for (const name of Object.keys(ANSWER_SHAPES) as AnswerShape[]) {
    it(`${name}: the same mismatches as ajv, in the same order, and none for an answer that fits`, () => {
      const validate = ajv.compile(ANSWER_SHAPES[name]);
      fc.assert(
        fc.property(answers(ANSWER_SHAPES[name]), (answer) => {
          const fits = validate(answer);
          const theirs = (validate.errors ?? []).map((e) => ({ keyword: e.keyword, instancePath: e.instancePath, message: e.message, ...(e.keyword === 'required' ? { missingProperty: (e.params as { missingProperty: string }).missingProperty } : {}) }));
          expect(shapeMismatches(ANSWER_SHAPES[name], answer)).to.deep.equal(fits ? [] : theirs);
          expect(answerMismatch(name, answer) === null).to.equal(fits);
        }),
        { numRuns: 400 },
      );
    });
  }

  it('names the first field that differs, deepest first among the branches of a choice', () => {
    expect(answerMismatch('queueList', { other: 1 })).to.equal('"queues" is missing');
    expect(answerMismatch('claim', { id: 'a', item: {}, attempts: 1, lease: { worker: 'w', until: 'soon' } })).to.equal('"lease/until" must be number');
    expect(answerMismatch('status', { id: 'a', status: 's', postedBy: 'p', postedAt: 1, updatedAt: 1, finishedAt: 'x', attempts: 1 })).to.equal('"finishedAt" must be number');
    expect(answerMismatch('manifest', [])).to.equal('the answer must be object');
    expect(answerMismatch('version', { api: 2 })).to.equal(null);
  });
});
