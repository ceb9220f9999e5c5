import { isUtf8 } from 'node:buffer';
import { Ajv2020, type ErrorObject, type ValidateFunction } from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';
import type { DefinitionPath } from './names.js';
import { cronProblem, MAX_SCHEDULES, type ScheduleDefinition } from '../engine/schedules.js';
import { urlProblem } from '../engine/urls.js';

/** A queue definition as stored (decisions §2.2); defaults are applied by {@link resolveQueue}. */
export interface QueueDefinition {
  leaseSeconds?: number;
  maxAttempts?: number;
  retryDelaySeconds?: number;
  retryBackoff?: 'fixed' | 'exponential';
  retryDelayMaxSeconds?: number;
  retryJitter?: number;
  timeoutSeconds?: number | null;
  retainFrom?: 'finished' | 'fetched';
  retainSeconds?: number;
  'svc-queue-archivePayloads'?: boolean;
  access?: Partial<Record<Operation, 'public' | string[]>>;
  schema?: Record<string, unknown> | boolean;
  description?: string;
  /** decisions §8.3 */
  schedules?: Record<string, ScheduleDefinition>;
  /** decisions §8.5 */
  maxActive?: number;
  groupMaxActive?: number;
  rateLimit?: { max: number; perSeconds: number };
  fairness?: 'fifo' | 'groups';
  /** decisions §8.6: the name of another queue of the same host. */
  deadLetter?: string;
  /** decisions §9.1: the server works the queue itself by POSTing each item to this target. */
  push?: PushDefinition;
  /** decisions §9.2: where the status record of each item of the queue is POSTed when it ends (an item's own `?callback` comes first). */
  callback?: string;
}

/** decisions §9.1 queue field `push`. */
export interface PushDefinition {
  url: string;
  timeoutSeconds?: number;
  concurrency?: number;
  headers?: Record<string, string>;
  secret?: string;
}

export interface UserDefinition {
  'svc-user-name': string;
  tokenSha256: string;
}

export type Operation = 'post' | 'fetch' | 'work';

const accessRule = {
  oneOf: [
    { const: 'public' },
    { type: 'array', items: { type: 'string', pattern: '^[a-z0-9][a-z0-9_-]{0,63}$' }, uniqueItems: true },
  ],
};

/**
 * The longest timeout and retention a definition may set: 10^12 seconds (over 31,000 years). The
 * spec sets no upper bound; this one keeps every deadline (a time in ms plus this many seconds) an
 * exact integer of milliseconds in JavaScript and in a PostgreSQL bigint, and refuses what is not
 * a number of seconds at all (`1e400` reads as Infinity).
 */
export const MAX_SECONDS = 1e12;

const queueSchema = {
  type: 'object',
  additionalProperties: false,
  properties: {
    leaseSeconds: { type: 'integer', minimum: 1, maximum: 86400 },
    maxAttempts: { type: 'integer', minimum: 1, maximum: 1000 },
    retryDelaySeconds: { type: 'integer', minimum: 0, maximum: 86400 },
    retryBackoff: { enum: ['fixed', 'exponential'] },
    retryDelayMaxSeconds: { type: 'integer', minimum: 1, maximum: 31536000 },
    retryJitter: { type: 'number', minimum: 0, maximum: 1 },
    timeoutSeconds: { oneOf: [{ type: 'integer', minimum: 1, maximum: MAX_SECONDS }, { type: 'null' }] },
    retainFrom: { enum: ['finished', 'fetched'] },
    retainSeconds: { type: 'integer', minimum: 0, maximum: MAX_SECONDS },
    'svc-queue-archivePayloads': { type: 'boolean' },
    access: {
      type: 'object',
      additionalProperties: false,
      properties: { post: accessRule, fetch: accessRule, work: accessRule },
    },
    schema: { type: ['object', 'boolean'] },
    description: { type: 'string' },
    // decisions §8.3; exactly one of cron and every, the zone and the item are checked in parseDefinition.
    // decisions §8.5
    maxActive: { type: 'integer', minimum: 1, maximum: 1000000 },
    groupMaxActive: { type: 'integer', minimum: 1, maximum: 1000000 },
    rateLimit: {
      type: 'object',
      additionalProperties: false,
      required: ['max', 'perSeconds'],
      properties: {
        max: { type: 'integer', minimum: 1, maximum: 1000000 },
        perSeconds: { type: 'integer', minimum: 1, maximum: 86400 },
      },
    },
    fairness: { enum: ['fifo', 'groups'] },
    // decisions §8.6: a queue name (decisions §2.1); that it is not the queue itself is checked in parseDefinition.
    deadLetter: { type: 'string', pattern: '^[a-z0-9][a-z0-9_-]{0,63}$' },
    // decisions §9.1; the URLs' form and the headers' names are checked in parseDefinition.
    push: {
      type: 'object',
      additionalProperties: false,
      required: ['url'],
      properties: {
        url: { type: 'string' },
        timeoutSeconds: { type: 'integer', minimum: 1, maximum: 3600 },
        concurrency: { type: 'integer', minimum: 1, maximum: 1000 },
        headers: { type: 'object', maxProperties: 64, additionalProperties: { type: 'string', maxLength: 8192 } },
        secret: { type: 'string', minLength: 16, maxLength: 256 },
      },
    },
    callback: { type: 'string' },
    schedules: {
      type: 'object',
      maxProperties: MAX_SCHEDULES,
      propertyNames: { pattern: '^[a-z0-9][a-z0-9_-]{0,63}$' },
      additionalProperties: {
        type: 'object',
        additionalProperties: false,
        properties: {
          cron: { type: 'string' },
          every: { type: 'integer', minimum: 1, maximum: 31536000 },
          timezone: { type: 'string' },
          item: { type: 'object' },
          priority: { type: 'integer', minimum: -100, maximum: 100 },
          group: { type: 'string', pattern: '^[\\x20-\\x7e]{1,128}$' },
          missed: { enum: ['skip', 'once', 'all'] },
          overlap: { enum: ['allow', 'skip'] },
        },
      },
    },
  },
} as const;

const userSchema = {
  type: 'object',
  additionalProperties: false,
  required: ['svc-user-name', 'tokenSha256'],
  properties: {
    'svc-user-name': { type: 'string' },
    tokenSha256: { type: 'string', pattern: '^[0-9a-f]{64}$' },
  },
} as const;

/**
 * The definitions' validators, each compiled when the first definition of its kind is read, and
 * the item-schema checker below, made at the first item schema: compiling them takes tens of
 * milliseconds, which a server need not spend before it listens on a root without them (nor
 * `svcq sync` on a folder without them).
 */
const addFormats = addFormatsModule.default;
// allErrors: a definition with several mistakes is reported whole, not one mistake per try.
// validateSchema: these two schemas are ours and fixed; checking them against the meta-schema
// would compile that too (the item-schema checker needs it; these do not).
let definitionsAjv: Ajv2020 | undefined;
const definitionValidators = new Map<'queue' | 'user', ValidateFunction>();
function definitionValidator(kind: 'queue' | 'user'): ValidateFunction {
  let validate = definitionValidators.get(kind);
  if (!validate) {
    definitionsAjv ??= new Ajv2020({ allErrors: true, strict: false, validateSchema: false });
    validate = definitionsAjv.compile(kind === 'queue' ? queueSchema : userSchema);
    definitionValidators.set(kind, validate);
  }
  return validate;
}

/** The options every item schema is compiled with. */
const ITEM_AJV_OPTIONS = { allErrors: true, strict: false } as const;

/** Checks item schemas against the JSON Schema meta-schema, compiled once; it keeps nothing of a schema it checked. */
let metaSchemaChecker: Ajv2020 | undefined;
function schemaChecker(): Ajv2020 {
  if (!metaSchemaChecker) {
    metaSchemaChecker = new Ajv2020(ITEM_AJV_OPTIONS);
    addFormats(metaSchemaChecker);
  }
  return metaSchemaChecker;
}

export type ItemValidator = ValidateFunction;

/**
 * Compiles a queue's item `schema`, or throws with ajv's own words about what is wrong.
 *
 * Each schema is compiled by an ajv instance of its own, which lives exactly as long as the
 * validator: an instance keeps every function it ever compiled (its code scope, which
 * `removeSchema` does not empty), so one shared instance grew by a few KB with every definition
 * PUT or reloaded, for as long as the server ran. A schema of its own also keeps two queues that
 * use the same `$id` apart. The schema is checked first by the one instance that has the
 * meta-schema compiled, so that the instance made here compiles only the schema itself.
 */
export function compileItemSchema(schema: Record<string, unknown> | boolean): ItemValidator {
  schemaChecker().validateSchema(schema, true);
  const ajv = new Ajv2020({ ...ITEM_AJV_OPTIONS, validateSchema: false });
  addFormats(ajv);
  return ajv.compile(schema);
}

/** What each definition field must be, in the words an error sentence uses. */
const FIELD_RULE: Record<string, string> = {
  leaseSeconds: 'an integer from 1 to 86400',
  maxAttempts: 'an integer from 1 to 1000',
  retryDelaySeconds: 'an integer from 0 to 86400',
  retryBackoff: '"fixed" or "exponential"',
  retryDelayMaxSeconds: 'an integer from 1 to 31536000',
  retryJitter: 'a number from 0 to 1',
  timeoutSeconds: 'an integer from 1 to 1000000000000, or null',
  retainFrom: '"finished" or "fetched"',
  retainSeconds: 'an integer from 0 to 1000000000000',
  'svc-queue-archivePayloads': 'true or false',
  access: 'an object with any of post, fetch and work',
  'access.post': '"public" or an array of distinct user names',
  'access.fetch': '"public" or an array of distinct user names',
  'access.work': '"public" or an array of distinct user names',
  schema: 'a JSON Schema (an object or a boolean)',
  description: 'a string',
  schedules: 'an object of at most 100 schedules named by 1 to 64 of a-z, 0-9, _ and - (starting with a letter or digit)',
  maxActive: 'an integer from 1 to 1000000',
  groupMaxActive: 'an integer from 1 to 1000000',
  rateLimit: 'an object { "max": integer 1–1000000, "perSeconds": integer 1–86400 }',
  'rateLimit.max': 'an integer from 1 to 1000000',
  'rateLimit.perSeconds': 'an integer from 1 to 86400',
  fairness: '"fifo" or "groups"',
  deadLetter: 'the name of another queue of the same host (1 to 64 of a-z, 0-9, _ and -, starting with a letter or digit)',
  push: 'an object { "url": URL, "timeoutSeconds"?: 1–3600, "concurrency"?: 1–1000, "headers"?: { name: value }, "secret"?: 16–256 characters }',
  'push.url': 'an absolute http:// or https:// URL',
  'push.timeoutSeconds': 'an integer from 1 to 3600',
  'push.concurrency': 'an integer from 1 to 1000',
  'push.headers': 'an object of at most 64 header names, each with a string value of at most 8192 characters',
  'push.secret': 'a string of 16 to 256 characters',
  callback: 'an absolute http:// or https:// URL',
  'svc-user-name': 'a string',
  tokenSha256: '64 lowercase hexadecimal characters (the sha256 of the token)',
};

/** One sentence for one thing ajv found, naming the field and what it must be. */
export function describeAjvError(error: ErrorObject, value?: unknown): string {
  const segments = error.instancePath.split('/').slice(1);
  if (error.keyword === 'additionalProperties') {
    const where = segments.join('.');
    return `unknown field "${(error.params as { additionalProperty: string }).additionalProperty}"${where ? ` in ${where}` : ''}`;
  }
  if (error.keyword === 'required') return `missing field "${(error.params as { missingProperty: string }).missingProperty}"`;
  // A bad element of an access list is reported against the list itself: that is the field a person edits.
  for (let n = segments.length; n > 0; n--) {
    const field = segments.slice(0, n).join('.');
    const rule = FIELD_RULE[field] ?? (segments[0] === 'schedules' && n === 3 ? SCHEDULE_RULE[segments[2]!] : undefined);
    if (rule) return `${field} must be ${rule} (got ${shortJson(pick(value, segments.slice(0, n)))})`;
  }
  const where = segments.join('.');
  return `${where ? `${where} ` : ''}${error.message ?? 'is invalid'}`;
}

function pick(value: unknown, segments: string[]): unknown {
  let at = value;
  for (const s of segments) at = typeof at === 'object' && at !== null ? (at as Record<string, unknown>)[s] : undefined;
  return at;
}

/**
 * Every problem ajv found, one sentence each. ajv reports a failed `oneOf` once per branch and
 * once for the whole; those all read as the same sentence about the field, which is kept once.
 */
export function describeAjvErrors(errors: ErrorObject[], value: unknown): string[] {
  return [...new Set(errors.map((e) => describeAjvError(e, value)))];
}

function shortJson(value: unknown): string {
  // A number too large for a double (1e400) is Infinity once parsed, which JSON would write as null.
  const text = typeof value === 'number' && !Number.isFinite(value) ? 'a number too large to read' : (JSON.stringify(value) ?? String(value));
  return text.length > 60 ? `${text.slice(0, 57)}...` : text;
}

export type ParsedDefinition =
  | { kind: 'queue'; queue: QueueDefinition; validator: ItemValidator | null }
  | { kind: 'user'; user: UserDefinition };

/** A definition that is refused: `error` is the one message (the file, then every problem), `problems` the problems alone. */
export interface DefinitionProblems {
  error: string;
  problems: string[];
}

function refused(file: string, problems: string[]): DefinitionProblems {
  return { error: `${file}: ${problems.join('; ')}`, problems };
}

/**
 * {@link parseDefinition} for a definition being written (a PUT, a sync): its bytes must also be
 * UTF-8 (RFC 8259 §8.1), as every request body must. It is stored exactly as sent and read as
 * UTF-8, so other bytes would be read with a character replaced. Files already under the root
 * are read as before.
 */
export function parseIncomingDefinition(at: DefinitionPath, bytes: Buffer): ParsedDefinition | DefinitionProblems {
  if (!isUtf8(bytes)) return refused(at.path, ['not UTF-8 text (JSON text is UTF-8, RFC 8259 §8.1)']);
  return parseDefinition(at, bytes);
}

/**
 * Parses and validates a definition's bytes for the folder its path names (interface §4.5 rule 2).
 * Returns the definition, or every problem found, so that one edit can fix them all.
 */
export function parseDefinition(at: DefinitionPath, bytes: Buffer | string): ParsedDefinition | DefinitionProblems {
  const file = at.path;
  let value: unknown;
  try {
    value = JSON.parse(typeof bytes === 'string' ? bytes : bytes.toString('utf8'));
  } catch (err) {
    return refused(file, [`not valid JSON (${(err as Error).message})`]);
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    return refused(file, ['a definition must be a JSON object']);
  }
  const record = value as Record<string, unknown>;
  const problems: string[] = [];
  if (at.kind === 'user') {
    const validateUserDef = definitionValidator('user');
    if (!validateUserDef(value)) problems.push(...describeAjvErrors(validateUserDef.errors!, value));
    const name = record['svc-user-name'];
    if (typeof name === 'string' && name !== at.name) problems.push(`svc-user-name "${name}" must equal the file name "${at.name}"`);
    if (problems.length > 0) return refused(file, problems);
    return { kind: 'user', user: value as unknown as UserDefinition };
  }
  const validateQueueDef = definitionValidator('queue');
  if (!validateQueueDef(value)) problems.push(...describeAjvErrors(validateQueueDef.errors!, value));
  const access = record.access;
  if (typeof access === 'object' && access !== null) {
    for (const [op, rule] of Object.entries(access)) {
      if (Array.isArray(rule) && rule.includes('public')) problems.push(`access.${op} names the reserved user "public"; write "public" instead of a list`);
    }
  }
  let validator: ItemValidator | null = null;
  const schema = record.schema;
  if (schema !== undefined && (typeof schema === 'boolean' || (typeof schema === 'object' && schema !== null && !Array.isArray(schema)))) {
    try {
      validator = compileItemSchema(schema as Record<string, unknown> | boolean);
    } catch (err) {
      problems.push(`schema does not compile: ${(err as Error).message}`);
    }
  }
  problems.push(...scheduleProblems(record.schedules, validator));
  if (record.deadLetter === at.name) problems.push(`deadLetter "${at.name}" names the queue itself; name another queue of the same host`);
  problems.push(...pushProblems(record.push, record.callback));
  if (problems.length > 0) return refused(file, problems);
  return { kind: 'queue', queue: value as QueueDefinition, validator };
}

/** Header names a push queue may not set: the server sets them itself (decisions §9.1). */
const RESERVED_HEADER = /^(content-type|content-length|host|connection|transfer-encoding|svcq-.*)$/i;
/** An HTTP field name (RFC 9110 §5.1: a token). */
const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

/** decisions §9.1–§9.2 beyond the JSON Schema: the URLs' form, and header names and values that HTTP can carry. */
function pushProblems(push: unknown, callback: unknown): string[] {
  const problems: string[] = [];
  if (typeof callback === 'string') {
    const problem = urlProblem(callback);
    if (problem) problems.push(`callback ${problem} (got ${shortJson(callback)})`);
  }
  if (typeof push !== 'object' || push === null || Array.isArray(push)) return problems;
  const def = push as Record<string, unknown>;
  if (typeof def.url === 'string') {
    const problem = urlProblem(def.url);
    if (problem) problems.push(`push.url ${problem} (got ${shortJson(def.url)})`);
  }
  if (typeof def.headers === 'object' && def.headers !== null && !Array.isArray(def.headers)) {
    for (const [name, value] of Object.entries(def.headers)) {
      if (!HEADER_NAME.test(name)) problems.push(`push.headers has "${name}", which is not an HTTP header name`);
      else if (RESERVED_HEADER.test(name)) problems.push(`push.headers may not set "${name}": the server sets it`);
      if (typeof value === 'string' && /[\r\n\0]/.test(value)) problems.push(`push.headers.${name} may not hold a line break or NUL`);
    }
  }
  return problems;
}

/** What each schedule field must be (decisions §8.3). */
const SCHEDULE_RULE: Record<string, string> = {
  cron: 'a cron expression of 5 fields',
  every: 'an integer number of seconds from 1 to 31536000',
  timezone: 'an IANA time zone name',
  item: 'a JSON object',
  priority: 'an integer from -100 to 100',
  group: '1 to 128 printable ASCII characters',
  missed: '"skip", "once" or "all"',
  overlap: '"allow" or "skip"',
};

/**
 * decisions §8.3 beyond the JSON Schema: exactly one of cron and every, a cron expression croner
 * reads, a zone this server knows, and an item the queue's own schema accepts.
 */
function scheduleProblems(schedules: unknown, validator: ItemValidator | null): string[] {
  if (typeof schedules !== 'object' || schedules === null || Array.isArray(schedules)) return [];
  const problems: string[] = [];
  for (const [name, s] of Object.entries(schedules as Record<string, unknown>)) {
    if (typeof s !== 'object' || s === null || Array.isArray(s)) continue;
    const def = s as Record<string, unknown>;
    if ((def.cron === undefined) === (def.every === undefined)) problems.push(`schedules.${name} must have exactly one of cron and every`);
    const problem = cronProblem(typeof def.cron === 'string' ? def.cron : undefined, typeof def.timezone === 'string' ? def.timezone : undefined);
    if (problem) problems.push(`schedules.${name}.${problem.field} ${problem.message}`);
    const item = def.item ?? {};
    if (validator && typeof item === 'object' && item !== null && !Array.isArray(item) && !validator(item)) {
      problems.push(`schedules.${name}.item does not match the queue's schema: ${describeAjvErrors(validator.errors ?? [], item).join('; ')}`);
    }
  }
  return problems;
}
