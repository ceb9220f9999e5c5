import path from 'node:path';
import type { AccessLogSink } from '../http/context.js';
import type { StoreHooks } from '../store/store.js';
import { AccessLog } from './access-log.js';
import { PayloadArchive } from './payload-archive.js';
import { TaskEventLog } from './task-events.js';

export interface ToolsOptions {
  /** `<root>/_svcq` */
  home: string;
}

export interface Tools {
  accessLog: AccessLogSink;
  hooks: StoreHooks;
  tasks: TaskEventLog;
  payloads: PayloadArchive;
  close(): Promise<void>;
}

/** Opens everything the server keeps beside the store: access log, task history, payload archive. */
export async function openTools(options: ToolsOptions): Promise<Tools> {
  const accessLog = await AccessLog.open(path.join(options.home, 'logs'));
  const tasks = new TaskEventLog(path.join(options.home, 'tasks'));
  const payloads = new PayloadArchive(path.join(options.home, 'payloads'));
  return {
    accessLog,
    tasks,
    payloads,
    hooks: {
      events: (events) => tasks.append(events),
      archive: (host, queue, id, kind, body) => payloads.write(host, queue, id, kind, body),
    },
    async close() {
      await Promise.all([accessLog.close(), tasks.close()]);
    },
  };
}
