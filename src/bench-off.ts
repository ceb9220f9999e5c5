/**
 * Parts of the server the benchmark may switch off to measure what each costs a request
 * (bench/single-post.ts): `SVCQ_BENCH_OFF=accesslog,metrics,history,events`. Read once at start;
 * empty unless that variable is set. Not an option of svcq: a server with any part off does not
 * keep the promises of decisions §5 (the access log, the task history, the metrics).
 */
const off = new Set((process.env.SVCQ_BENCH_OFF ?? '').split(',').filter(Boolean));

export const benchOff = {
  /** No access-log line per request. */
  accessLog: off.has('accesslog'),
  /** No request metrics, and no store observer (commit timings, event counters, rates). */
  metrics: off.has('metrics'),
  /** The task history (day-files) is not written: the outbox is never drained. */
  history: off.has('history') || off.has('events'),
  /** No task events made at all, neither in the journal nor in the history (the embedded store). */
  events: off.has('events'),
};
