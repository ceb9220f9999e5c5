/**
 * svcq's client library (`import { SvcqClient } from 'svcq/client'`): the HTTP client every svcq
 * command uses, with the types of the queue endpoints' requests and answers. docs/client.md shows
 * a producer and a worker written with it.
 */
export { CALL_TIMEOUT_MS, ClientError, POST_TIMEOUT_MS, SvcqClient, answerText, WALL, WALL_WITHOUT_TOKEN, type CallOptions, type ClaimOptions, type ClientErrorCode, type ClientOptions, type JsonObjectOrText, type PostOptions, type RawHandIn, type RawResponse, type SubmitOptions } from './client.js';
export { isTransient, surelyNotApplied } from './backoff.js';
export type { BatchAnswer, BatchEntryAnswer, ClaimAnswer, ClaimedItem, ClaimManyAnswer, ClaimRequest, DoneAnswer, DoneEntry, PostAnswer, ServerClock, StatusAnswer, SubmissionAnswer } from '../protocol.js';
export type { Manifest } from '../definitions/manifest.js';
export type { PauseAnswer } from '../operators/answers.js';
export { Final, Release, RetryIn, type WorkHandler, type WorkJob, type WorkOptions, type WorkSummary, type Working } from './work.js';
export type { WorkerEvent } from './work-events.js';
