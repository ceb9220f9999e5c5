import type { SvcqClient } from '../client/client.js';
import type { PauseAnswer } from '../operators/answers.js';
import { onQueue, type QueueTarget } from './queue-arg.js';

/**
 * `svcq pause` (`paused` true) and `svcq resume` (decisions §8.4): the call, and the line that
 * says what became of the queue. Either is idempotent: the line says the state the queue is in.
 */
export async function setQueuePaused(client: SvcqClient, target: QueueTarget, paused: boolean): Promise<{ answer: PauseAnswer; line: string }> {
  const answer = await onQueue(target, () => (paused ? client.pause(target.host, target.name) : client.resume(target.host, target.name)));
  const queue = `${target.host}/${target.name}`;
  const line = answer.paused ? `${queue} is paused: its claims find nothing until svcq resume ${queue}` : `${queue} is not paused: its claims lease items`;
  return { answer, line };
}
