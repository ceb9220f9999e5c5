/**
 * The shapes of svcq's answers, as far as the client reads them: a 2xx answer that does not fit
 * came from something that is not svcq (a --url that names another web server, a proxy's page)
 * and is refused in one sentence rather than read as `undefined` further on. Fields the client
 * does not read are not checked, and extra fields are allowed: a newer server may add some.
 *
 * The shapes are written in JSON Schema, and checked by the few lines below rather than by ajv:
 * compiling them took every client command some 50 ms, and loading ajv as much again, for
 * schemas that use eight keywords. The check finds what ajv finds (with `allErrors: false`), in
 * the same order; a test holds the two to that.
 */

/** The part of JSON Schema the shapes use. */
export interface Shape {
  type?: 'integer' | 'number' | 'string' | 'boolean' | 'object' | 'array' | 'null';
  const?: string | number | boolean | null;
  anyOf?: Shape[];
  allOf?: Shape[];
  required?: string[];
  properties?: Record<string, Shape>;
  additionalProperties?: Shape;
  items?: Shape;
}

const integer = { type: 'integer' } as const;
const number = { type: 'number' } as const;
const string = { type: 'string' } as const;
const boolean = { type: 'boolean' } as const;
const object = { type: 'object' } as const;
const nullable = (schema: Shape): Shape => ({ anyOf: [schema, { type: 'null' }] });
const shape = (properties: Record<string, Shape>, required = Object.keys(properties)): Shape => ({ type: 'object', properties, required });

const LEASE = shape({ worker: string, until: number });
const CLAIMED = shape({ id: string, item: object, attempts: integer, lease: LEASE });
const DONE: Shape = { type: 'array', items: { anyOf: [shape({ id: string, ok: { const: true }, accepted: boolean, status: string }), shape({ id: string, ok: { const: false }, error: string })] } };
const COUNTS: Shape = { type: 'object', additionalProperties: integer };
const QUEUE_ENTRY: Record<string, Shape> = { host: string, name: string, counts: COUNTS, oldestPendingAgeMs: nullable(number), rates: { type: 'object', additionalProperties: number } };
/** Checked where given, not required: a server from before pauses (decisions §8.4) says nothing of them. */
const PAUSED: Record<string, Shape> = { paused: boolean };

/** Every answer the client reads, by name. */
const SHAPES = {
  version: shape({ api: integer }),
  manifest: { type: 'object', additionalProperties: string },
  put: shape({ ok: { const: true } }),
  deleted: shape({ deleted: boolean }),
  post: shape({ id: string, status: string }),
  batch: shape({ items: { type: 'array', items: { anyOf: [shape({ ok: { const: true }, id: string, status: string }), shape({ ok: { const: false }, errors: { type: 'array' } })] } } }),
  status: shape({ id: string, status: string, postedBy: string, postedAt: number, updatedAt: number, finishedAt: nullable(number), attempts: integer }),
  submission: shape({ accepted: boolean, status: string }),
  claim: {
    anyOf: [
      { allOf: [CLAIMED, shape({ done: DONE }, [])] },
      shape({ empty: { const: true }, done: DONE }, ['empty']),
      shape({ items: { type: 'array', items: CLAIMED }, done: DONE }, ['items']),
    ],
  },
  queueList: shape({ queues: { type: 'array', items: shape({ ...QUEUE_ENTRY, ...PAUSED }, Object.keys(QUEUE_ENTRY)) } }),
  queueDetail: shape(
    {
      ...QUEUE_ENTRY,
      ...PAUSED,
      oldest: { type: 'array', items: shape({ id: string, postedAt: number, attempts: integer }) },
      leases: { type: 'array', items: shape({ id: string, worker: string, until: number, attempts: integer }) },
      schedules: { type: 'array', items: shape({ name: string, next: nullable(number), last: nullable(number), lastId: nullable(string) }) },
    },
    [...Object.keys(QUEUE_ENTRY), 'oldest', 'leases'],
  ),
  pause: shape({ paused: boolean }),
  redrive: shape({ moved: integer, more: boolean }),
  retry: shape({ retried: integer, more: boolean }),
  cancel: shape({ cancelled: integer, more: boolean }),
  logs: shape({ active: nullable(shape({ size: integer })), rotated: { type: 'array', items: shape({ ts: integer, size: integer }) } }),
  stats: shape({ interval: number, files: { type: 'array', items: shape({ name: string, type: string, date: string, size: integer }) } }),
  tasks: shape({ files: { type: 'array', items: shape({ name: string, date: string, size: integer }) } }),
  snapshot: shape({
    ts: number,
    uptime: number,
    hostname: string,
    load: { type: 'array', items: number },
    cpu: nullable(shape({ model: string, cores: { type: 'array', items: shape({ user: number, nice: number, sys: number, idle: number, irq: number }) } })),
    memory: nullable(shape({ total: number, used: number, available: number, free: number })),
    disk: nullable(shape({ path: string, total: number, used: number, free: number })),
    diskIo: nullable(shape({ readBytes: number, writeBytes: number })),
    netIo: nullable(shape({ rxBytes: number, txBytes: number })),
  }),
} satisfies Record<string, Shape>;

export type AnswerShape = keyof typeof SHAPES;

/** Every shape by name (for the test that holds the check to ajv's). */
export const ANSWER_SHAPES: Readonly<Record<AnswerShape, Shape>> = SHAPES;

/** Where an answer first differs from a shape, as ajv reports it. */
export interface Mismatch {
  keyword: 'type' | 'const' | 'anyOf' | 'required';
  /** JSON Pointer to the value that differs (`/items/0/lease/until`; the answer itself is ""). */
  instancePath: string;
  message: string;
  /** With `required`: the property that is missing. */
  missingProperty?: string;
}

/**
 * Whether `answer` has the shape svcq gives `name`: null if it does, else where it first differs,
 * in words (`"queues" is missing`, `"items/0/lease/until" must be number`).
 */
export function answerMismatch(name: AnswerShape, answer: unknown): string | null {
  const found: Mismatch[] = [];
  if (check(SHAPES[name], answer, '', found)) return null;
  return describe(deepest(found));
}

/** What ajv reports of `value` against `shape`, in its order: nothing when it fits. */
export function shapeMismatches(shape: Shape, value: unknown): Mismatch[] {
  const found: Mismatch[] = [];
  check(shape, value, '', found);
  return found;
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

function typeFits(type: NonNullable<Shape['type']>, v: unknown): boolean {
  switch (type) {
    case 'integer':
      return typeof v === 'number' && Number.isInteger(v);
    case 'number':
      return typeof v === 'number' && Number.isFinite(v);
    case 'object':
      return isObject(v);
    case 'array':
      return Array.isArray(v);
    case 'null':
      return v === null;
    default:
      return typeof v === type;
  }
}

const pointer = (at: string, key: string | number): string => `${at}/${String(key).replaceAll('~', '~0').replaceAll('/', '~1')}`;

/**
 * Ajv's order without `allErrors`: the type; `const`, then `anyOf` (every branch is tried and
 * what each found is kept, unless one fits), then `allOf`; then `required` (the first missing),
 * `additionalProperties`, `properties` (in the shape's order), `items`. The first that fails
 * ends the check of that value.
 */
function check(shape: Shape, v: unknown, at: string, found: Mismatch[]): boolean {
  if (shape.type !== undefined && !typeFits(shape.type, v)) return fail(found, { keyword: 'type', instancePath: at, message: `must be ${shape.type}` });
  if ('const' in shape && v !== shape.const) return fail(found, { keyword: 'const', instancePath: at, message: 'must be equal to constant' });
  if (shape.anyOf) {
    const before = found.length;
    if (shape.anyOf.some((branch) => check(branch, v, at, found))) found.length = before;
    else return fail(found, { keyword: 'anyOf', instancePath: at, message: 'must match a schema in anyOf' });
  }
  if (shape.allOf && !shape.allOf.every((part) => check(part, v, at, found))) return false;
  if (isObject(v)) {
    const missing = shape.required?.find((key) => v[key] === undefined);
    if (missing !== undefined) return fail(found, { keyword: 'required', instancePath: at, message: `must have required property '${missing}'`, missingProperty: missing });
    const extra = shape.additionalProperties;
    if (extra && !Object.keys(v).every((key) => (shape.properties && key in shape.properties) || check(extra, v[key], pointer(at, key), found))) return false;
    for (const [key, property] of Object.entries(shape.properties ?? {})) {
      if (v[key] !== undefined && !check(property, v[key], pointer(at, key), found)) return false;
    }
  }
  if (Array.isArray(v) && shape.items && !v.every((item, i) => check(shape.items!, item, pointer(at, i), found))) return false;
  return true;
}

function fail(found: Mismatch[], mismatch: Mismatch): false {
  found.push(mismatch);
  return false;
}

/** Of the errors of an `anyOf`, the one that got furthest into the answer says most. */
function deepest(errors: Mismatch[]): Mismatch | undefined {
  let best: Mismatch | undefined;
  for (const e of errors) {
    if (e.keyword === 'anyOf') continue;
    const depth = e.instancePath.split('/').length + (e.keyword === 'required' ? 1 : 0);
    const bestDepth = best ? best.instancePath.split('/').length + (best.keyword === 'required' ? 1 : 0) : -1;
    if (depth > bestDepth) best = e;
  }
  return best ?? errors[0];
}

function describe(e: Mismatch | undefined): string {
  if (!e) return 'it has another shape';
  const at = e.instancePath.slice(1);
  if (e.keyword === 'required') return `"${at ? `${at}/` : ''}${e.missingProperty}" is missing`;
  return at ? `"${at}" ${e.message ?? 'is wrong'}` : `the answer ${e.message ?? 'has another shape'}`;
}
