/**
 * The RabbitMQ side of `--vs rabbitmq`, in a child process of its own like the other drivers: a
 * durable quorum queue (`x-queue-type: quorum`) declared for this round; `inFlight` producer loops
 * publish `jobs` persistent messages on one confirm channel, each loop waiting for its message's
 * publisher confirm before the next (so `inFlight` unconfirmed at most); a consumer on a
 * connection of its own (prefetch `inFlight`, manual acks) parses each message and acks it. RabbitMQ
 * confirms a message to a quorum queue once a majority of its replicas (here the one node) has
 * written it to its log and fsynced it. Reports acked jobs per second from the first publish to
 * the last ack (and one round trip on the consumer's channel after it, so that the node has the
 * acks in hand), and the CPU time of `cpuPid` (the node's beam.smp) over the same window.
 */
import { performance } from 'node:perf_hooks';
import amqp, { type ConsumeMessage } from 'amqplib';
import { makeItem, RESULT_PREFIX } from './protocol.js';
import { cpuMsOf, type CycleResult, type CycleSpec } from './procs.js';

const spec = JSON.parse(process.argv[2] ?? '') as CycleSpec;

const producerConnection = await amqp.connect(spec.url);
const consumerConnection = await amqp.connect(spec.url);
const publisher = await producerConnection.createConfirmChannel();
await publisher.assertQueue(spec.queue, { durable: true, arguments: { 'x-queue-type': 'quorum' } });
const consumer = await consumerConnection.createChannel();
await consumer.prefetch(spec.inFlight);

let completed = 0;
let posted = 0;
let errors = 0;
let firstError: string | undefined;
const fail = (message: string): void => {
  errors++;
  firstError ??= message;
};
let finish: () => void = () => {};
const allDone = new Promise<void>((resolve) => (finish = resolve));

await consumer.consume(
  spec.queue,
  (msg: ConsumeMessage | null) => {
    if (msg === null) return;
    // What a handler gets: the item as an object.
    JSON.parse(msg.content.toString('utf8'));
    consumer.ack(msg);
    completed++;
    if (completed >= spec.jobs) finish();
  },
  { noAck: false },
);

const serverCpu0 = cpuMsOf(spec.cpuPid);
const clientCpu0 = process.cpuUsage();
const t0 = performance.now();
const deadline = t0 + spec.timeoutMs;

function publish(seq: number): Promise<void> {
  return new Promise((resolve, reject) => {
    publisher.sendToQueue(spec.queue, Buffer.from(makeItem(seq, spec.itemBytes)), { persistent: true, contentType: 'application/json' }, (err: unknown) => (err ? reject(err instanceof Error ? err : new Error(String(err))) : resolve()));
  });
}

async function producer(): Promise<void> {
  while (posted < spec.jobs && performance.now() < deadline) {
    const seq = posted++;
    try {
      await publish(seq);
    } catch (err) {
      fail(`publish: ${(err as Error).message}`);
    }
  }
}

let timedOut = false;
const timer = setTimeout(() => {
  timedOut = true;
  finish();
}, spec.timeoutMs);
await Promise.all(Array.from({ length: spec.inFlight }, () => producer()));
await allDone;
// The channel answers in order: this reply comes after the node has taken every ack before it.
await consumer.checkQueue(spec.queue);
const elapsedMs = performance.now() - t0;
const serverCpuMs = cpuMsOf(spec.cpuPid) - serverCpu0;
const clientCpu = process.cpuUsage(clientCpu0);
clearTimeout(timer);

await consumer.close();
await publisher.deleteQueue(spec.queue);
await publisher.close();
await consumerConnection.close();
await producerConnection.close();

const result: CycleResult = { completed, posted, errors, firstError, elapsedMs, rate: (completed * 1000) / elapsedMs, timedOut, serverCpuMs, clientCpuMs: (clientCpu.user + clientCpu.system) / 1000 };
process.stdout.write(`${RESULT_PREFIX}${JSON.stringify(result)}\n`);
process.exit(0);
