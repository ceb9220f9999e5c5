/**
 * The shapes of svcq's answers, as far as the client reads them: a 2xx answer that does not fit
 * came from something that is not svcq (a --url that names another web server, a proxy's page)
 * and is refused in one sentence rather than read as `undefined` further on. Fields the client
 * does not read are not checked, and extra fields are allowed: a newer server may add some.
 */
import { Ajv2020, type ErrorObject, type ValidateFunction } from 'ajv/dist/2020.js';

const integer = { type: 'integer' } as const;
const number = { type: 'number' } as const;
const string = { type: 'string' } as const;
const boolean = { type: 'boolean' } as const;
const object = { type: 'object' } as const;
const nullable = (schema: object): object => ({ anyOf: [schema, { type: 'null' }] });
const shape = (properties: Record<string, object>, required = Object.keys(properties)): object => ({ type: 'object', properties, required });

const LEASE = shape({ worker: string, until: number });
const CLAIMED = shape({ id: string, item: object, attempts: integer, lease: LEASE });
const DONE = { type: 'array', items: { anyOf: [shape({ id: string, ok: { const: true }, accepted: boolean, status: string }), shape({ id: string, ok: { const: false }, error: string })] } };
const COUNTS = { type: 'object', additionalProperties: integer };
const QUEUE_ENTRY = { host: string, name: string, counts: COUNTS, oldestPendingAgeMs: nullable(number), rates: { type: 'object', additionalProperties: number } };
/** Checked where given, not required: a server from before pauses (decisions §8.4) says nothing of them. */
const PAUSED = { paused: boolean };

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
    },
    [...Object.keys(QUEUE_ENTRY), 'oldest', 'leases'],
  ),
  pause: shape({ paused: boolean }),
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
} satisfies Record<string, object>;

export type AnswerShape = keyof typeof SHAPES;

const ajv = new Ajv2020({ allErrors: false, strict: false });
const compiled = new Map<AnswerShape, ValidateFunction>();

/**
 * Whether `answer` has the shape svcq gives `name`: null if it does, else where it first differs,
 * in words (`"queues" is missing`, `"items/0/lease/until" must be number`).
 */
export function answerMismatch(name: AnswerShape, answer: unknown): string | null {
  let validate = compiled.get(name);
  if (!validate) compiled.set(name, (validate = ajv.compile(SHAPES[name])));
  if (validate(answer)) return null;
  return describe(deepest(validate.errors ?? []));
}

/** Of the errors of an `anyOf`, the one that got furthest into the answer says most. */
function deepest(errors: ErrorObject[]): ErrorObject | undefined {
  let best: ErrorObject | undefined;
  for (const e of errors) {
    if (e.keyword === 'anyOf') continue;
    const depth = e.instancePath.split('/').length + (e.keyword === 'required' ? 1 : 0);
    const bestDepth = best ? best.instancePath.split('/').length + (best.keyword === 'required' ? 1 : 0) : -1;
    if (depth > bestDepth) best = e;
  }
  return best ?? errors[0];
}

function describe(e: ErrorObject | undefined): string {
  if (!e) return 'it has another shape';
  const at = e.instancePath.slice(1);
  if (e.keyword === 'required') return `"${at ? `${at}/` : ''}${(e.params as { missingProperty: string }).missingProperty}" is missing`;
  return at ? `"${at}" ${e.message ?? 'is wrong'}` : `the answer ${e.message ?? 'has another shape'}`;
}
