import type pg from 'pg';

/**
 * The PostgreSQL schema of the store, as versioned migrations (decisions §6.1: "schema changes
 * are versioned migrations run at start, safe when several nodes start at once").
 *
 * Times are integers (milliseconds since the epoch, `bigint`), as the store's clock gives them:
 * every time-driven rule compares them with a `now` passed as a parameter, never with the
 * database's clock, so a fake clock drives the store exactly as it drives the others.
 *
 * Deadlines are data on the rows (decisions §3.2): `lease_until`, `available_at`, `posted_at`,
 * `finished_at` and `fetched_at`, each under a partial index. Timeout and retention are not
 * stored as absolute deadlines because they move when a queue is redefined (decisions §2.4: a
 * shortened timeout applies to items already queued): the sweep compares `posted_at`,
 * `finished_at` or `fetched_at` with `now - timeoutMs` / `now - retainMs` of the rules in force.
 */
export interface Migration {
  version: number;
  description: string;
  sql: string;
}

export const MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    description: 'items, claim order, idempotency keys, deadline indexes, task events, known queues',
    sql: `
      -- Claim order: one sequence for every queue (unique and increasing within each queue).
      CREATE SEQUENCE svcq_item_ord AS bigint;

      CREATE TABLE svcq_items (
        queue           text    NOT NULL,          -- '<host>/<name>'
        id              text    NOT NULL,          -- 16 lowercase hex characters
        ord             bigint  NOT NULL,
        body            text    NOT NULL,          -- the item's JSON text exactly as posted (not jsonb: bytes round-trip)
        posted_by       text    NOT NULL,
        posted_at       bigint  NOT NULL,
        idempotency_key text,
        status          text    NOT NULL,
        updated_at      bigint  NOT NULL,
        finished_at     bigint,
        attempts        integer NOT NULL,
        lease_worker    text,
        lease_until     bigint,
        available_at    bigint  NOT NULL DEFAULT 0,
        progress        text,
        result          text,
        error           text,
        fetched_at      bigint,
        -- Bumped by every write: an UPDATE guarded on it loses detectably if the row moved under it.
        version         bigint  NOT NULL DEFAULT 0,
        PRIMARY KEY (queue, id),
        CHECK (status IN ('pending', 'claimed', 'processing', 'finished', 'failed', 'timedout', 'cancelled'))
      );

      -- A key names at most one live item of a queue; INSERT ... ON CONFLICT DO NOTHING relies on it.
      CREATE UNIQUE INDEX svcq_items_idempotency ON svcq_items (queue, idempotency_key) WHERE idempotency_key IS NOT NULL;
      -- Claims walk pending items in claim order.
      CREATE INDEX svcq_items_pending ON svcq_items (queue, ord) WHERE status = 'pending';
      -- Counts by status, the oldest pending posted_at, and the timeout sweep (non-terminal by posted_at).
      CREATE INDEX svcq_items_status ON svcq_items (queue, status, posted_at);
      -- Lease ends (sweep) and the current leases, soonest end first (overview).
      CREATE INDEX svcq_items_leases ON svcq_items (queue, lease_until) WHERE status IN ('claimed', 'processing');
      -- Re-queued items waiting out their retry delay.
      CREATE INDEX svcq_items_retry ON svcq_items (queue, available_at) WHERE available_at > 0;
      -- Retention from "finished" and from "fetched".
      CREATE INDEX svcq_items_finished ON svcq_items (queue, finished_at) WHERE finished_at IS NOT NULL;
      CREATE INDEX svcq_items_fetched ON svcq_items (queue, fetched_at) WHERE fetched_at IS NOT NULL;

      -- Task events (decisions §5), written in the transaction of the change that made them.
      CREATE TABLE svcq_events (
        seq      bigserial PRIMARY KEY,
        ts       bigint  NOT NULL,
        host     text    NOT NULL,
        queue    text    NOT NULL,
        id       text    NOT NULL,
        event    text    NOT NULL,
        attempts integer NOT NULL,
        status   text    NOT NULL,
        worker   text
      );

      -- Queues that ever held an item: the periodic sweep walks these.
      CREATE TABLE svcq_queues (
        key text PRIMARY KEY
      );
    `,
  },
  {
    version: 2,
    description: 'definitions as exact bytes by path, with a revision counter other nodes follow',
    sql: `
      -- Definitions (decisions §2, §6.1): the exact bytes by server-relative path. A DELETE keeps
      -- the row with bytes NULL (a tombstone) so that other nodes learn of it by its revision.
      CREATE TABLE svcq_definitions (
        path     text   PRIMARY KEY,
        bytes    bytea,
        revision bigint NOT NULL
      );
      -- Other nodes read what changed after the revision they hold.
      CREATE INDEX svcq_definitions_revision ON svcq_definitions (revision);

      -- One row: the last revision given. A write increments it first and holds its row lock until
      -- COMMIT, so revisions become visible in the order they were given (no reader skips one).
      CREATE TABLE svcq_definition_revision (
        one      boolean PRIMARY KEY DEFAULT true CHECK (one),
        revision bigint  NOT NULL
      );
      INSERT INTO svcq_definition_revision (one, revision) VALUES (true, 0);
    `,
  },
  {
    version: 3,
    description: 'task events read in transaction order by every node, and purged by age',
    sql: `
      -- The transaction that wrote each event. seq is given when the INSERT runs, not at COMMIT, so
      -- a reader that followed seq could pass an event whose transaction commits later; every
      -- transaction older than the oldest one still running (pg_snapshot_xmin) has ended, so events
      -- are read by xid, only below that horizon, where no more can appear (see postgres-store.ts).
      -- Rows already here get the xid of this migration.
      ALTER TABLE svcq_events ADD COLUMN xid xid8 NOT NULL DEFAULT pg_current_xact_id();
      CREATE INDEX svcq_events_xid ON svcq_events (xid, seq);
      -- Events are appended in roughly ts order: a BRIN index finds the old ones to purge for little upkeep.
      CREATE INDEX svcq_events_ts ON svcq_events USING brin (ts);
    `,
  },
  {
    version: 4,
    description: 'archived payloads',
    sql: `
      -- Archived payloads (decisions §5): for queues with svc-queue-archivePayloads, the exact bytes
      -- of an item, its latest accepted progress, its result and its latest error, written in the
      -- transaction of the change that accepted them. Not tied to svcq_items: they survive retention.
      CREATE TABLE svcq_payloads (
        host       text   NOT NULL,
        queue      text   NOT NULL,
        id         text   NOT NULL,
        kind       text   NOT NULL,
        body       bytea  NOT NULL,
        updated_at bigint NOT NULL,
        PRIMARY KEY (host, queue, id, kind),
        CHECK (kind IN ('item', 'progress', 'result', 'error'))
      );
    `,
  },
  {
    version: 5,
    description: 'item counts by queue and status, kept as items change',
    sql: `
      -- Counts by status (decisions §5.1: "kept as items change, never by scanning items"). Every
      -- transaction that changes items appends its net change per (queue, status) to
      -- svcq_count_deltas (no unique key: concurrent writers never wait on one row); a count is
      -- svcq_counts.n plus the deltas not yet folded in, and any node's periodic sweep folds them in
      -- (DELETE … FOR UPDATE SKIP LOCKED, so nodes compacting at once take different rows).
      CREATE TABLE svcq_counts (
        queue  text   NOT NULL,
        status text   NOT NULL,
        n      bigint NOT NULL,
        PRIMARY KEY (queue, status)
      );
      CREATE TABLE svcq_count_deltas (
        queue  text    NOT NULL,
        status text    NOT NULL,
        delta  integer NOT NULL
      );
      CREATE INDEX svcq_count_deltas_queue ON svcq_count_deltas (queue);
      -- Transactions of nodes still running an older build finish before the rows are counted
      -- (the count's snapshot is taken after the lock is granted).
      LOCK TABLE svcq_items IN SHARE MODE;
      INSERT INTO svcq_counts (queue, status, n) SELECT queue, status, count(*) FROM svcq_items GROUP BY queue, status;
    `,
  },
  {
    version: 6,
    description: 'a guarded write that lost a race fails its statement',
    sql: `
      -- A transaction's last statement writes what it staged, each row guarded by the version it
      -- read, and its COMMIT is sent right behind it without waiting for its answer. When a guard
      -- fails, this error aborts the transaction, so that COMMIT rolls it back; the store then
      -- runs the calls again (40001, serialization_failure: a reason that passes).
      CREATE FUNCTION svcq_stale_write(what text) RETURNS integer LANGUAGE plpgsql VOLATILE AS $$
      BEGIN
        RAISE EXCEPTION 'a write lost a race: % changed under it', what USING ERRCODE = '40001';
      END
      $$;
    `,
  },
  {
    version: 7,
    description: 'live items by posting time, in place of every item by status and posting time',
    sql: `
      -- The timeout sweep and the soonest timeout read the items not yet ended by posting time; no
      -- statement reads ended items through (queue, status, posted_at) any more (counts are kept in
      -- svcq_counts). An index of live items only is not written when an item ends, so every job
      -- costs one index entry fewer. Built while the migration lock is held: writers of the table
      -- wait for it (a few seconds per million items).
      CREATE INDEX svcq_items_live ON svcq_items (queue, posted_at) WHERE status IN ('pending', 'claimed', 'processing');
      DROP INDEX svcq_items_status;
    `,
  },
  {
    version: 8,
    description: 'task events without a unique index of their own',
    sql: `
      -- Events are read by (xid, seq) and purged by ts (BRIN) and ctid; nothing looks one up by seq,
      -- and a unique index on it cost an index entry per event, three per job.
      ALTER TABLE svcq_events DROP CONSTRAINT svcq_events_pkey;
    `,
  },
  {
    version: 9,
    description: 'the transaction that wrote an item last',
    sql: `
      -- The task history reads transactions in the order of their ids, which is not the order they
      -- commit in: a transaction that got its id early (with a post) may change an item that one
      -- with a later id has just posted or changed. A write is guarded to come from a transaction
      -- with an id no lower than the one that wrote the row last (a lower one runs again, with a
      -- new id), so an item's events are in the history in the order they happened. Rows written
      -- before this migration hold 0. A constant default first: the table is not rewritten.
      ALTER TABLE svcq_items ADD COLUMN writer xid8 NOT NULL DEFAULT '0';
      ALTER TABLE svcq_items ALTER COLUMN writer SET DEFAULT pg_current_xact_id();
    `,
  },
  {
    version: 10,
    description: 'the master token the nodes share, by its sha256',
    sql: `
      -- Recorded by the first node to start; a node whose token differs is refused at start, since
      -- every management call through a load balancer that reached it would meet the wall.
      CREATE TABLE svcq_master_token (
        one         boolean PRIMARY KEY DEFAULT true CHECK (one),
        sha256      text NOT NULL,
        recorded_at timestamptz NOT NULL DEFAULT now()
      );
    `,
  },
  {
    version: 11,
    description: 'paused queues',
    sql: `
      -- A paused queue leases nothing (decisions §8.4). Kept with the queue's key, not with its
      -- definition: a queue deleted and put back is still paused, as its items are still there.
      -- Every claim reads it in its own statement (see postgres-store.ts), so a pause holds on
      -- every node from its COMMIT on. A constant default: the table is not rewritten.
      ALTER TABLE svcq_queues ADD COLUMN paused boolean NOT NULL DEFAULT false;
    `,
  },
  {
    version: 12,
    description: 'item priority and group; claim order by priority',
    sql: `
      -- decisions §8.1. Constant defaults: the table is not rewritten.
      ALTER TABLE svcq_items ADD COLUMN priority smallint NOT NULL DEFAULT 0, ADD COLUMN grp text;
      -- Claims walk claimable items in claim order: the highest priority first, then ord
      -- (replacing the index by ord alone). Keyed on -priority, so that a claim's page cursor is
      -- one row comparison, ((-priority), ord) > ($r, $o), which the index answers as a range.
      -- Only items with no time to wait for are in it: a million delayed items cost a claim
      -- nothing. The sweep that starts each transaction sets available_at to 0 once it has passed
      -- (as it did for retry delays), which moves the item into the index.
      DROP INDEX svcq_items_pending;
      CREATE INDEX svcq_items_pending ON svcq_items (queue, (-priority), ord) WHERE status = 'pending' AND available_at = 0;
      -- Items waiting for their time, in claim order: the operators' view lists the first pending
      -- items of both kinds without sorting them all.
      CREATE INDEX svcq_items_waiting ON svcq_items (queue, (-priority), ord) WHERE status = 'pending' AND available_at > 0;
    `,
  },
  {
    version: 13,
    description: "schedules: each one's state, and the posted events that name a schedule",
    sql: `
      -- decisions §8.3: one row per schedule, locked and conditionally updated in the transaction
      -- that inserts the items its occurrences post. spec_hash: the definition the row is of (a
      -- changed schedule starts afresh); passed_at: every occurrence at or before it has passed;
      -- last_at, last_id: the last occurrence that posted an item, and that item.
      CREATE TABLE svcq_schedules (
        queue     text   NOT NULL,
        name      text   NOT NULL,
        spec_hash text   NOT NULL,
        passed_at bigint NOT NULL,
        last_at   bigint,
        last_id   text,
        PRIMARY KEY (queue, name)
      );
      ALTER TABLE svcq_events ADD COLUMN schedule text, ADD COLUMN occurrence bigint;
    `,
  },
  {
    version: 14,
    description: 'dead letters: the copy an item names, the source a dead letter names, and the events that say so',
    sql: `
      -- decisions §8.6. dead_letter_id: the id of the item's copy in its queue's deadLetter queue;
      -- source: on a dead letter, where it came from, as JSON text ({queue, id, status, attempts,
      -- error}). Null on other items. No default: the table is not rewritten.
      ALTER TABLE svcq_items ADD COLUMN dead_letter_id text, ADD COLUMN source text;
      -- A redrive walks a queue's pending dead letters in claim order.
      CREATE INDEX svcq_items_dead_letters ON svcq_items (queue, (-priority), ord) WHERE status = 'pending' AND source IS NOT NULL;
      ALTER TABLE svcq_events ADD COLUMN dead_letter text, ADD COLUMN redriven_to text;
    `,
  },
  {
    version: 15,
    description: 'flow control: limiter rows, the rate window, groups and their turns',
    sql: `
      -- decisions §8.5, see docs/postgresql-flow.md. One row per queue with a limit or groups
      -- fairness, locked (FOR UPDATE) by every claim on the queue, at the start of its
      -- transaction: claims of such a queue take turns on every node, and count what is leased
      -- under the lock. turn: the groups fairness counter (each leased item is one turn);
      -- rate_max, rate_count: the rate window's size and the leases noted so far (RateRing);
      -- last_at: the time of the last noted lease (a later claim never notes an earlier one);
      -- ready_groups: groups whose head is known (svcq_groups.head_p set), for the operators' view.
      CREATE TABLE svcq_limiters (
        queue        text    PRIMARY KEY,
        turn         bigint  NOT NULL DEFAULT 0,
        rate_max     integer NOT NULL DEFAULT 0,
        rate_count   bigint  NOT NULL DEFAULT 0,
        last_at      bigint  NOT NULL DEFAULT 0,
        ready_groups integer NOT NULL DEFAULT 0
      );
      -- The rate window as RateRing keeps it: lease number k is in slot k mod rate_max, with its
      -- time. A slot never written stands for a lease before every window.
      CREATE TABLE svcq_rate_slots (
        queue text    NOT NULL,
        slot  integer NOT NULL,
        at    bigint  NOT NULL,
        PRIMARY KEY (queue, slot)
      );
      -- Groups of a queue with groups fairness or groupMaxActive (grp '' for items without one).
      -- turn: the queue's turn counter when the group was last served (0: never). head_p,
      -- head_ord: the priority and claim order of the group's first claimable item as the claims
      -- last knew it (NULL: none known), checked against the items when the group is picked.
      -- Only claims write it, under the queue's limiter row.
      CREATE TABLE svcq_groups (
        queue    text     NOT NULL,
        grp      text     NOT NULL,
        turn     bigint   NOT NULL DEFAULT 0,
        head_p   smallint,
        head_ord bigint,
        PRIMARY KEY (queue, grp)
      );
      -- The least recently served group with a claimable item of the highest priority first ...
      CREATE INDEX svcq_groups_fair ON svcq_groups (queue, (-head_p), turn, head_ord) WHERE head_p IS NOT NULL;
      -- ... or, without fairness, the group whose first claimable item comes first in claim order.
      CREATE INDEX svcq_groups_fifo ON svcq_groups (queue, (-head_p), head_ord) WHERE head_p IS NOT NULL;
      -- Items that became claimable in such a queue (posted, re-queued, their delay over), one row
      -- per group and transaction, appended in the transaction that made them claimable (no
      -- unique key: writers never wait on each other). The next claim folds them into svcq_groups.
      CREATE TABLE svcq_group_wakes (
        queue    text     NOT NULL,
        grp      text     NOT NULL,
        priority smallint NOT NULL,
        ord      bigint   NOT NULL
      );
      CREATE INDEX svcq_group_wakes_queue ON svcq_group_wakes (queue);
      -- Every claim by groups rewrites a row or two of svcq_groups and deletes the wakes it folds:
      -- vacuumed after a thousand dead rows rather than a fifth of the table, so that the index
      -- a pick reads first does not fill with dead entries.
      ALTER TABLE svcq_groups SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000);
      ALTER TABLE svcq_group_wakes SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000);
      -- A group's claimable items in claim order.
      CREATE INDEX svcq_items_groups ON svcq_items (queue, (coalesce(grp, '')), (-priority), ord) WHERE status = 'pending' AND available_at = 0;

      -- Folds the wakes of a queue into its groups: a group's head becomes the best of what it
      -- was and what woke it (higher priority, then earlier in claim order).
      CREATE FUNCTION svcq_fold_groups(q text) RETURNS void LANGUAGE plpgsql VOLATILE AS $f$
      DECLARE
        w record;
        old record;
        added integer := 0;
      BEGIN
        FOR w IN WITH d AS (DELETE FROM svcq_group_wakes x WHERE x.queue = q RETURNING x.grp, x.priority, x.ord)
                 SELECT DISTINCT ON (d.grp) d.grp, d.priority, d.ord FROM d ORDER BY d.grp, d.priority DESC, d.ord LOOP
          SELECT s.head_p, s.head_ord INTO old FROM svcq_groups s WHERE s.queue = q AND s.grp = w.grp;
          IF NOT FOUND THEN
            INSERT INTO svcq_groups (queue, grp, head_p, head_ord) VALUES (q, w.grp, w.priority, w.ord);
            added := added + 1;
          ELSIF old.head_p IS NULL THEN
            UPDATE svcq_groups s SET head_p = w.priority, head_ord = w.ord WHERE s.queue = q AND s.grp = w.grp;
            added := added + 1;
          ELSIF w.priority > old.head_p OR (w.priority = old.head_p AND w.ord < old.head_ord) THEN
            UPDATE svcq_groups s SET head_p = w.priority, head_ord = w.ord WHERE s.queue = q AND s.grp = w.grp;
          END IF;
        END LOOP;
        IF added > 0 THEN
          UPDATE svcq_limiters l SET ready_groups = l.ready_groups + added WHERE l.queue = q;
        END IF;
      END
      $f$;

      -- Rebuilds a queue's group heads from its items (when a node first claims under a
      -- definition: items made claimable while the queue had no groups left no wakes). Reads one
      -- index entry per group (a skip scan of svcq_items_groups), not every item.
      CREATE FUNCTION svcq_rebuild_groups(q text) RETURNS void LANGUAGE plpgsql VOLATILE AS $f$
      DECLARE
        k text;
        h record;
        n integer := 0;
      BEGIN
        DELETE FROM svcq_group_wakes x WHERE x.queue = q;
        UPDATE svcq_groups s SET head_p = NULL, head_ord = NULL WHERE s.queue = q AND s.head_p IS NOT NULL;
        SELECT coalesce(i.grp, '') INTO k FROM svcq_items i WHERE i.queue = q AND i.status = 'pending' AND i.available_at = 0
          ORDER BY coalesce(i.grp, '') LIMIT 1;
        WHILE k IS NOT NULL LOOP
          SELECT i.priority, i.ord INTO h FROM svcq_items i WHERE i.queue = q AND coalesce(i.grp, '') = k AND i.status = 'pending' AND i.available_at = 0
            ORDER BY (-i.priority), i.ord LIMIT 1;
          INSERT INTO svcq_groups AS s (queue, grp, head_p, head_ord) VALUES (q, k, h.priority, h.ord)
            ON CONFLICT (queue, grp) DO UPDATE SET head_p = EXCLUDED.head_p, head_ord = EXCLUDED.head_ord;
          n := n + 1;
          k := (SELECT coalesce(i.grp, '') FROM svcq_items i WHERE i.queue = q AND i.status = 'pending' AND i.available_at = 0 AND coalesce(i.grp, '') > k
                 ORDER BY coalesce(i.grp, '') LIMIT 1);
        END LOOP;
        UPDATE svcq_limiters l SET ready_groups = n WHERE l.queue = q;
      END
      $f$;

      -- Picks and locks up to want claimable items of a queue by groups: with fair, each from the
      -- least recently served group holding a claimable item of the highest priority there is
      -- (ties: the group whose first such item comes first); without, each the first claimable
      -- item in claim order of a group below gmax. Each item taken is a turn of the queue, stamped
      -- on its group. Returns the items in the order taken (n from 1); a last row with a NULL id
      -- when a group at gmax held a claimable item and fewer than want were taken. The queue's
      -- limiter row is locked by the caller.
      CREATE FUNCTION svcq_claim_groups(q text, want integer, gmax integer, fair boolean)
        RETURNS TABLE (id text, n integer) LANGUAGE plpgsql VOLATILE AS $f$
      DECLARE
        leased jsonb := '{}';
        skip text[] := '{}';
        taken text[] := '{}';
        g record;
        h record;
        nx record;
        got integer := 0;
        t bigint;
        saturated boolean := false;
        emptied integer := 0;
      BEGIN
        IF want <= 0 OR EXISTS (SELECT 1 FROM svcq_queues WHERE key = q AND paused) THEN
          RETURN;
        END IF;
        PERFORM svcq_fold_groups(q);
        IF gmax IS NOT NULL THEN
          -- Leased items by group: read through svcq_items_leases, as many as are leased.
          SELECT coalesce(jsonb_object_agg(x.k, x.c), '{}') INTO leased FROM (
            SELECT coalesce(i.grp, '') AS k, count(*) AS c FROM svcq_items i
             WHERE i.queue = q AND i.status IN ('claimed', 'processing') GROUP BY 1) AS x;
        END IF;
        SELECT l.turn INTO t FROM svcq_limiters l WHERE l.queue = q;
        WHILE got < want LOOP
          IF fair THEN
            SELECT s.grp, s.head_p, s.head_ord INTO g FROM svcq_groups s
             WHERE s.queue = q AND s.head_p IS NOT NULL AND s.grp <> ALL (skip)
             ORDER BY (-s.head_p), s.turn, s.head_ord LIMIT 1;
          ELSE
            SELECT s.grp, s.head_p, s.head_ord INTO g FROM svcq_groups s
             WHERE s.queue = q AND s.head_p IS NOT NULL AND s.grp <> ALL (skip)
             ORDER BY (-s.head_p), s.head_ord LIMIT 1;
          END IF;
          IF NOT FOUND THEN
            -- Nothing known: an item made claimable without a wake (by a node that did not yet
            -- know the queue's groups) is found here. Only when no group was passed over, so
            -- that this never walks the items of a saturated group.
            EXIT WHEN cardinality(skip) > 0;
            SELECT coalesce(i.grp, '') AS grp, i.priority, i.ord INTO h FROM svcq_items i
             WHERE i.queue = q AND i.status = 'pending' AND i.available_at = 0 AND i.id <> ALL (taken)
             ORDER BY (-i.priority), i.ord LIMIT 1;
            EXIT WHEN NOT FOUND;
            INSERT INTO svcq_groups AS s (queue, grp, head_p, head_ord) VALUES (q, h.grp, h.priority, h.ord)
              ON CONFLICT (queue, grp) DO UPDATE SET head_p = EXCLUDED.head_p, head_ord = EXCLUDED.head_ord;
            emptied := emptied - 1;
            CONTINUE;
          END IF;
          IF gmax IS NOT NULL AND coalesce((leased ->> g.grp)::integer, 0) >= gmax THEN
            skip := skip || g.grp;
            saturated := true;
            CONTINUE;
          END IF;
          -- The group's first claimable item as it is now.
          SELECT i.id, i.priority, i.ord INTO h FROM svcq_items i
           WHERE i.queue = q AND coalesce(i.grp, '') = g.grp AND i.status = 'pending' AND i.available_at = 0 AND i.id <> ALL (taken)
           ORDER BY (-i.priority), i.ord LIMIT 1;
          IF NOT FOUND THEN
            UPDATE svcq_groups s SET head_p = NULL, head_ord = NULL WHERE s.queue = q AND s.grp = g.grp;
            emptied := emptied + 1;
            CONTINUE;
          END IF;
          IF h.priority <> g.head_p OR h.ord <> g.head_ord THEN
            -- What the group row said is out of date (an item taken, cancelled, or made claimable
            -- again): corrected, and the group takes its place again.
            UPDATE svcq_groups s SET head_p = h.priority, head_ord = h.ord WHERE s.queue = q AND s.grp = g.grp;
            CONTINUE;
          END IF;
          -- The condition is tested as (…) IS TRUE, which no partial index's predicate is proved
          -- from: written plainly, the planner may walk a whole partial index of the queue's
          -- claimable items (a million rows) to find the one id, instead of probing the primary key.
          PERFORM 1 FROM svcq_items i WHERE i.queue = q AND i.id = h.id AND (i.status = 'pending' AND i.available_at = 0) IS TRUE FOR UPDATE SKIP LOCKED;
          IF NOT FOUND THEN
            -- Held by another transaction (a cancel, a sweep): the group sits this claim out.
            skip := skip || g.grp;
            CONTINUE;
          END IF;
          got := got + 1;
          t := t + 1;
          taken := taken || h.id;
          leased := jsonb_set(leased, ARRAY[g.grp], to_jsonb(coalesce((leased ->> g.grp)::integer, 0) + 1));
          SELECT i.priority, i.ord INTO nx FROM svcq_items i
           WHERE i.queue = q AND coalesce(i.grp, '') = g.grp AND i.status = 'pending' AND i.available_at = 0
             AND ((-i.priority), i.ord) > ((-h.priority), h.ord) AND i.id <> ALL (taken)
           ORDER BY (-i.priority), i.ord LIMIT 1;
          IF FOUND THEN
            UPDATE svcq_groups s SET turn = t, head_p = nx.priority, head_ord = nx.ord WHERE s.queue = q AND s.grp = g.grp;
          ELSE
            UPDATE svcq_groups s SET turn = t, head_p = NULL, head_ord = NULL WHERE s.queue = q AND s.grp = g.grp;
            emptied := emptied + 1;
          END IF;
          id := h.id;
          n := got;
          RETURN NEXT;
        END LOOP;
        UPDATE svcq_limiters l SET turn = t, ready_groups = greatest(0, l.ready_groups - emptied) WHERE l.queue = q;
        IF saturated AND got < want THEN
          id := NULL;
          n := got + 1;
          RETURN NEXT;
        END IF;
      END
      $f$;
    `,
  },
  {
    version: 16,
    description: 'flow control: claims by groups take their items set-based, and answer as decisions 8.5 says after a claim with criteria',
    sql: `
      -- decisions §8.5, see docs/postgresql-flow.md. The wakes folded in one statement (was: a
      -- loop of two or three statements per group).
      CREATE OR REPLACE FUNCTION svcq_fold_groups(q text) RETURNS void LANGUAGE plpgsql VOLATILE AS $f$
      DECLARE
        added integer;
      BEGIN
        WITH d AS (DELETE FROM svcq_group_wakes x WHERE x.queue = q RETURNING x.grp, x.priority, x.ord),
             w AS (SELECT DISTINCT ON (d.grp) d.grp, d.priority, d.ord FROM d ORDER BY d.grp, d.priority DESC, d.ord),
             was AS (SELECT s.grp, s.head_p FROM svcq_groups s JOIN w ON s.queue = q AND s.grp = w.grp),
             up AS (INSERT INTO svcq_groups AS s (queue, grp, head_p, head_ord) SELECT q, w.grp, w.priority, w.ord FROM w
                    ON CONFLICT (queue, grp) DO UPDATE SET head_p = EXCLUDED.head_p, head_ord = EXCLUDED.head_ord
                    WHERE s.head_p IS NULL OR EXCLUDED.head_p > s.head_p OR (EXCLUDED.head_p = s.head_p AND EXCLUDED.head_ord < s.head_ord))
        SELECT count(*) INTO added FROM w LEFT JOIN was ON was.grp = w.grp WHERE was.head_p IS NULL;
        IF added > 0 THEN
          UPDATE svcq_limiters l SET ready_groups = l.ready_groups + added WHERE l.queue = q;
        END IF;
      END
      $f$;

      -- The heads rebuilt in one statement: a skip scan of svcq_items_groups (two index probes
      -- per group), written with one upsert (was: three statements per group).
      CREATE OR REPLACE FUNCTION svcq_rebuild_groups(q text) RETURNS void LANGUAGE plpgsql VOLATILE AS $f$
      DECLARE
        n integer;
      BEGIN
        DELETE FROM svcq_group_wakes x WHERE x.queue = q;
        UPDATE svcq_groups s SET head_p = NULL, head_ord = NULL WHERE s.queue = q AND s.head_p IS NOT NULL;
        WITH RECURSIVE g AS (
            (SELECT coalesce(i.grp, '') AS k FROM svcq_items i WHERE i.queue = q AND i.status = 'pending' AND i.available_at = 0
              ORDER BY coalesce(i.grp, '') LIMIT 1)
          UNION ALL
            SELECT (SELECT coalesce(i.grp, '') FROM svcq_items i WHERE i.queue = q AND i.status = 'pending' AND i.available_at = 0 AND coalesce(i.grp, '') > g.k
                     ORDER BY coalesce(i.grp, '') LIMIT 1)
              FROM g WHERE g.k IS NOT NULL
          ),
          up AS (INSERT INTO svcq_groups AS s (queue, grp, head_p, head_ord)
                 SELECT q, g.k, h.priority, h.ord FROM g CROSS JOIN LATERAL (
                   SELECT i.priority, i.ord FROM svcq_items i WHERE i.queue = q AND coalesce(i.grp, '') = g.k AND i.status = 'pending' AND i.available_at = 0
                    ORDER BY (-i.priority), i.ord LIMIT 1) AS h
                  WHERE g.k IS NOT NULL
                 ON CONFLICT (queue, grp) DO UPDATE SET head_p = EXCLUDED.head_p, head_ord = EXCLUDED.head_ord
                 RETURNING 1)
        SELECT count(*) INTO n FROM up;
        UPDATE svcq_limiters l SET ready_groups = n WHERE l.queue = q;
      END
      $f$;

      -- Picks and locks up to want claimable items of a queue by groups, as version 15's did one
      -- by one (with fair, each from the least recently served group holding a claimable item of
      -- the highest priority there is, ties going to the group whose first such item comes first;
      -- without, the first claimable item in claim order of a group below gmax), but a batch of
      -- groups at a time: one statement reads the next groups in that order with the first two
      -- claimable items of each, one locks their first items (FOR UPDATE SKIP LOCKED), one
      -- writes their rows. The groups of a batch are the next turns as long as none of the groups
      -- served before it in the batch comes back ahead of it: with fair, as long as its priority
      -- is not below the next item of a group served (a group served goes behind every other of
      -- its priority); without, as long as its first item comes before the next item of each. The
      -- batch ends at the first group that fails that, or whose row is out of date (put right);
      -- the next batch picks again from there. A group at gmax is passed over, and holds the
      -- claim back (a last row with a NULL id, when fewer than want were taken) only if it holds
      -- a claimable item. A group's turn is stamped only with fair. The queue's limiter row is
      -- locked by the caller. ROWS 10: estimated at the default thousand rows, the caller's
      -- join of its rows with the items was planned as a hash of every item of the queue.
      CREATE OR REPLACE FUNCTION svcq_claim_groups(q text, want integer, gmax integer, fair boolean)
        RETURNS TABLE (id text, n integer) LANGUAGE plpgsql VOLATILE ROWS 10 AS $f$
      DECLARE
        leased jsonb := '{}';
        -- Groups passed over by this call: at gmax, or their first item held by another transaction.
        skip text[] := '{}';
        -- Groups at gmax.
        at_max text[] := '{}';
        taken text[] := '{}';
        cur refcursor;
        r record;
        h record;
        t bigint;
        got integer := 0;
        emptied integer := 0;
        saturated boolean := false;
        -- The batch: each group, its first item, and its next head.
        b_grp text[];
        b_id text[];
        b_p smallint[];
        b_o bigint[];
        -- The rows written for the groups served.
        u_grp text[];
        u_t bigint[];
        u_p smallint[];
        u_o bigint[];
        -- What the groups served in the batch bound the next one of it by: with fair, the highest
        -- priority of their next items; without, the first of their next items in claim order.
        bound_p integer;
        bound_o bigint;
        -- A group's first item and the priority and claim order of its next.
        h1_id text;
        h1_p smallint;
        h1_o bigint;
        h2_p smallint;
        h2_o bigint;
        c integer;
        locked text[];
        rows_read integer;
      BEGIN
        IF want <= 0 OR EXISTS (SELECT 1 FROM svcq_queues WHERE key = q AND paused) THEN
          RETURN;
        END IF;
        IF EXISTS (SELECT 1 FROM svcq_group_wakes w WHERE w.queue = q) THEN
          PERFORM svcq_fold_groups(q);
        END IF;
        IF gmax IS NOT NULL THEN
          -- Leased items by group: read through svcq_items_leases, as many as are leased.
          SELECT coalesce(jsonb_object_agg(x.k, x.c), '{}'), coalesce(array_agg(x.k) FILTER (WHERE x.c >= gmax), '{}') INTO leased, at_max FROM (
            SELECT coalesce(i.grp, '') AS k, count(*) AS c FROM svcq_items i
             WHERE i.queue = q AND i.status IN ('claimed', 'processing') GROUP BY 1) AS x;
          skip := at_max;
        END IF;
        SELECT l.turn INTO t FROM svcq_limiters l WHERE l.queue = q;
        WHILE got < want LOOP
          b_grp := '{}'; b_id := '{}'; b_p := '{}'; b_o := '{}';
          bound_p := NULL; bound_o := NULL;
          rows_read := 0;
          -- Each group's first two items by a subquery of the select list (a SubPlan, run for
          -- each group the walk returns): never turned into a join that reads the queue's items.
          IF fair THEN
            OPEN cur FOR SELECT s.grp, s.head_p, s.head_ord, (
                SELECT jsonb_agg(jsonb_build_array(i.id, i.priority, i.ord) ORDER BY (-i.priority), i.ord) FROM (
                  SELECT i.id, i.priority, i.ord FROM svcq_items i
                   WHERE i.queue = q AND coalesce(i.grp, '') = s.grp AND i.status = 'pending' AND i.available_at = 0 AND i.id <> ALL (taken)
                   ORDER BY (-i.priority), i.ord LIMIT 2) AS i) AS its
              FROM svcq_groups s
             WHERE s.queue = q AND s.head_p IS NOT NULL AND s.grp <> ALL (skip)
             ORDER BY (-s.head_p), s.turn, s.head_ord LIMIT want - got;
          ELSE
            OPEN cur FOR SELECT s.grp, s.head_p, s.head_ord, (
                SELECT jsonb_agg(jsonb_build_array(i.id, i.priority, i.ord) ORDER BY (-i.priority), i.ord) FROM (
                  SELECT i.id, i.priority, i.ord FROM svcq_items i
                   WHERE i.queue = q AND coalesce(i.grp, '') = s.grp AND i.status = 'pending' AND i.available_at = 0 AND i.id <> ALL (taken)
                   ORDER BY (-i.priority), i.ord LIMIT 2) AS i) AS its
              FROM svcq_groups s
             WHERE s.queue = q AND s.head_p IS NOT NULL AND s.grp <> ALL (skip)
             ORDER BY (-s.head_p), s.head_ord LIMIT want - got;
          END IF;
          LOOP
            FETCH cur INTO r;
            EXIT WHEN NOT FOUND;
            rows_read := rows_read + 1;
            IF r.its IS NULL THEN
              -- No claimable item left (taken, cancelled): the row says so now; the batch ends here.
              UPDATE svcq_groups s SET head_p = NULL, head_ord = NULL WHERE s.queue = q AND s.grp = r.grp;
              emptied := emptied + 1;
              EXIT;
            END IF;
            h1_id := r.its -> 0 ->> 0;
            h1_p := (r.its -> 0 ->> 1)::smallint;
            h1_o := (r.its -> 0 ->> 2)::bigint;
            h2_p := (r.its -> 1 ->> 1)::smallint;
            h2_o := (r.its -> 1 ->> 2)::bigint;
            IF h1_p <> r.head_p OR h1_o <> r.head_ord THEN
              -- What the row said is out of date (an item taken, cancelled, or made claimable
              -- again): corrected, and the next batch picks again from here.
              UPDATE svcq_groups s SET head_p = h1_p, head_ord = h1_o WHERE s.queue = q AND s.grp = r.grp;
              EXIT;
            END IF;
            -- A group served earlier in the batch comes back ahead of this one: the next batch.
            EXIT WHEN bound_p IS NOT NULL AND (CASE WHEN fair THEN r.head_p < bound_p ELSE ((-r.head_p), r.head_ord) > ((-bound_p), bound_o) END);
            b_grp := b_grp || r.grp;
            b_id := b_id || h1_id;
            b_p := b_p || h2_p;
            b_o := b_o || h2_o;
            IF h2_p IS NOT NULL AND (gmax IS NULL OR coalesce((leased ->> r.grp)::integer, 0) + 1 < gmax) THEN
              IF bound_p IS NULL OR (CASE WHEN fair THEN h2_p > bound_p ELSE ((-h2_p), h2_o) < ((-bound_p), bound_o) END) THEN
                bound_p := h2_p;
                bound_o := h2_o;
              END IF;
            END IF;
          END LOOP;
          CLOSE cur;
          IF rows_read = 0 THEN
            -- Nothing known: an item made claimable without a wake (by a node that did not yet
            -- know the queue's groups) is found here. Only when no group was passed over, so
            -- that this never walks the items of a saturated group.
            EXIT WHEN cardinality(skip) > 0;
            SELECT coalesce(i.grp, '') AS grp, i.priority, i.ord INTO h FROM svcq_items i
             WHERE i.queue = q AND i.status = 'pending' AND i.available_at = 0 AND i.id <> ALL (taken)
             ORDER BY (-i.priority), i.ord LIMIT 1;
            EXIT WHEN NOT FOUND;
            INSERT INTO svcq_groups AS s (queue, grp, head_p, head_ord) VALUES (q, h.grp, h.priority, h.ord)
              ON CONFLICT (queue, grp) DO UPDATE SET head_p = EXCLUDED.head_p, head_ord = EXCLUDED.head_ord;
            emptied := emptied - 1;
            CONTINUE;
          END IF;
          CONTINUE WHEN cardinality(b_id) = 0;
          -- The condition is tested as (…) IS TRUE, which no partial index's predicate is proved
          -- from: written plainly, the planner may walk a whole partial index of the queue's
          -- claimable items (a million rows) to find the ids, instead of probing the primary key.
          SELECT coalesce(array_agg(x.id), '{}') INTO locked FROM (
            SELECT i.id FROM svcq_items i WHERE i.queue = q AND i.id = ANY (b_id) AND (i.status = 'pending' AND i.available_at = 0) IS TRUE
               FOR UPDATE SKIP LOCKED) AS x;
          u_grp := '{}'; u_t := '{}'; u_p := '{}'; u_o := '{}';
          FOR c IN 1 .. cardinality(b_id) LOOP
            IF NOT (b_id[c] = ANY (locked)) THEN
              -- Held by another transaction (a cancel, a sweep): the group sits this claim out.
              skip := skip || b_grp[c];
              CONTINUE;
            END IF;
            got := got + 1;
            t := t + 1;
            taken := taken || b_id[c];
            leased := jsonb_set(leased, ARRAY[b_grp[c]], to_jsonb(coalesce((leased ->> b_grp[c])::integer, 0) + 1));
            IF gmax IS NOT NULL AND (leased ->> b_grp[c])::integer >= gmax THEN
              skip := skip || b_grp[c];
              at_max := at_max || b_grp[c];
            END IF;
            u_grp := u_grp || b_grp[c];
            u_t := u_t || t;
            u_p := u_p || b_p[c];
            u_o := u_o || b_o[c];
            IF b_p[c] IS NULL THEN
              emptied := emptied + 1;
            END IF;
            id := b_id[c];
            n := got;
            RETURN NEXT;
          END LOOP;
          IF cardinality(u_grp) > 0 THEN
            -- By primary key (grp = ANY): a join with the arrays has a generic plan that reads
            -- every group of the queue.
            UPDATE svcq_groups s SET turn = CASE WHEN fair THEN u_t[array_position(u_grp, s.grp)] ELSE s.turn END,
                   head_p = u_p[array_position(u_grp, s.grp)], head_ord = u_o[array_position(u_grp, s.grp)]
             WHERE s.queue = q AND s.grp = ANY (u_grp);
          END IF;
        END LOOP;
        UPDATE svcq_limiters l SET turn = t, ready_groups = greatest(0, l.ready_groups - emptied) WHERE l.queue = q;
        IF got < want AND cardinality(at_max) > 0 THEN
          -- A group at gmax holds the claim back only if it holds a claimable item.
          saturated := EXISTS (SELECT 1 FROM unnest(at_max) AS f(g) WHERE EXISTS (
            SELECT 1 FROM svcq_items i WHERE i.queue = q AND coalesce(i.grp, '') = f.g AND i.status = 'pending' AND i.available_at = 0 AND i.id <> ALL (taken)));
          IF saturated THEN
            id := NULL;
            n := got + 1;
            RETURN NEXT;
          END IF;
        END IF;
      END
      $f$;
    `,
  },
  {
    version: 17,
    description: "push delivery: the status code and time of a delivery's events",
    sql: `
      -- decisions §9.1: on a delivered / delivery-failed event, the target's status code (NULL
      -- when it gave none) and the milliseconds the request took; NULL on every other event.
      ALTER TABLE svcq_events ADD COLUMN code integer, ADD COLUMN ms integer;
    `,
  },
  {
    version: 18,
    description: 'callbacks when an item ends: the item\'s own URL, and the callbacks owed',
    sql: `
      -- decisions §9.2. callback: the item's own callback URL (a post's ?callback), or null;
      -- callbacks_owed: how many callbacks are owed for it: retention passes over it while above 0.
      -- A constant default: the table is not rewritten.
      ALTER TABLE svcq_items ADD COLUMN callback text, ADD COLUMN callbacks_owed integer NOT NULL DEFAULT 0;
      -- One row per callback owed, inserted in the transaction that ended its item, deleted once
      -- delivered or dropped. due_at: when the next attempt may be made (while one is under way,
      -- the end of its hold); tries: failed attempts so far.
      CREATE TABLE svcq_callbacks (
        id         text    PRIMARY KEY,
        queue      text    NOT NULL,
        item_id    text    NOT NULL,
        event      text    NOT NULL,
        url        text    NOT NULL,
        owed_since bigint  NOT NULL,
        due_at     bigint  NOT NULL,
        tries      integer NOT NULL
      );
      -- Every node takes the soonest due first (FOR UPDATE SKIP LOCKED).
      CREATE INDEX svcq_callbacks_due ON svcq_callbacks (due_at);
      -- The operators' counts of a queue.
      CREATE INDEX svcq_callbacks_queue ON svcq_callbacks (queue, tries);
    `,
  },
  {
    version: 19,
    description: 'flow control: claims by groups fairness take their items in one statement, their turns from a sequence',
    sql: `
      -- decisions §8.5, see docs/postgresql-flow.md. The plain claims of a queue with groups
      -- fairness and no limit take their items in one statement sent by the store (claimFair),
      -- and call svcq_claim_groups only for what that statement leaves (taken0: the items it took,
      -- not yet written). Claims by groups still take turns on the queue's limiter row. Also:
      -- - the turns come from one sequence for every queue (only their order within a queue is
      --   read), not from a counter in the row;
      -- - a group row is put right only where no other transaction holds it, and from the items
      --   as they are then; a served group's row keeps a better head folded in since it was read;
      -- - wakes are folded by whichever claim locks them first, into the group rows in key order.
      -- ready_groups was kept and never read: dropped, with the counter.
      CREATE SEQUENCE svcq_turns;
      SELECT setval('svcq_turns', greatest(1, (SELECT max(turn) FROM svcq_limiters), (SELECT max(turn) FROM svcq_groups)));
      ALTER TABLE svcq_limiters DROP COLUMN turn, DROP COLUMN ready_groups;

      CREATE OR REPLACE FUNCTION svcq_fold_groups(q text) RETURNS void LANGUAGE plpgsql VOLATILE AS $f$
      BEGIN
        WITH d AS (DELETE FROM svcq_group_wakes x
                    WHERE x.ctid = ANY (ARRAY(SELECT y.ctid FROM svcq_group_wakes y WHERE y.queue = q FOR UPDATE SKIP LOCKED))
                    RETURNING x.grp, x.priority, x.ord),
             w AS (SELECT DISTINCT ON (d.grp) d.grp, d.priority, d.ord FROM d ORDER BY d.grp, d.priority DESC, d.ord)
        INSERT INTO svcq_groups AS s (queue, grp, head_p, head_ord) SELECT q, w.grp, w.priority, w.ord FROM w ORDER BY w.grp
          ON CONFLICT (queue, grp) DO UPDATE SET head_p = EXCLUDED.head_p, head_ord = EXCLUDED.head_ord
          WHERE s.head_p IS NULL OR EXCLUDED.head_p > s.head_p OR (EXCLUDED.head_p = s.head_p AND EXCLUDED.head_ord < s.head_ord);
      END
      $f$;

      -- Run under the limiter row's lock.
      CREATE OR REPLACE FUNCTION svcq_rebuild_groups(q text) RETURNS void LANGUAGE plpgsql VOLATILE AS $f$
      BEGIN
        DELETE FROM svcq_group_wakes x WHERE x.queue = q;
        UPDATE svcq_groups s SET head_p = NULL, head_ord = NULL WHERE s.queue = q AND s.head_p IS NOT NULL;
        WITH RECURSIVE g AS (
            (SELECT coalesce(i.grp, '') AS k FROM svcq_items i WHERE i.queue = q AND i.status = 'pending' AND i.available_at = 0
              ORDER BY coalesce(i.grp, '') LIMIT 1)
          UNION ALL
            SELECT (SELECT coalesce(i.grp, '') FROM svcq_items i WHERE i.queue = q AND i.status = 'pending' AND i.available_at = 0 AND coalesce(i.grp, '') > g.k
                     ORDER BY coalesce(i.grp, '') LIMIT 1)
              FROM g WHERE g.k IS NOT NULL
          )
        INSERT INTO svcq_groups AS s (queue, grp, head_p, head_ord)
          SELECT q, g.k, h.priority, h.ord FROM g CROSS JOIN LATERAL (
            SELECT i.priority, i.ord FROM svcq_items i WHERE i.queue = q AND coalesce(i.grp, '') = g.k AND i.status = 'pending' AND i.available_at = 0
             ORDER BY (-i.priority), i.ord LIMIT 1) AS h
           WHERE g.k IS NOT NULL
          ON CONFLICT (queue, grp) DO UPDATE SET head_p = EXCLUDED.head_p, head_ord = EXCLUDED.head_ord;
      END
      $f$;

      -- Puts a group's head right from its claimable items as they are now (NULL: none), unless
      -- another transaction holds the row (false: it serves the group, the caller leaves it).
      CREATE FUNCTION svcq_put_group_right(q text, g text, taken text[]) RETURNS boolean LANGUAGE plpgsql VOLATILE AS $f$
      BEGIN
        PERFORM 1 FROM svcq_groups s WHERE s.queue = q AND s.grp = g FOR UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
          RETURN false;
        END IF;
        UPDATE svcq_groups s SET (head_p, head_ord) = (
            SELECT i.priority, i.ord FROM svcq_items i
             WHERE i.queue = q AND coalesce(i.grp, '') = g AND i.status = 'pending' AND i.available_at = 0 AND i.id <> ALL (taken)
             ORDER BY (-i.priority), i.ord LIMIT 1)
         WHERE s.queue = q AND s.grp = g;
        RETURN true;
      END
      $f$;

      -- As version 16's, with the changes above: each item taken is one turn, nextval of
      -- svcq_turns; no limiter row is read or written. taken0: items this transaction locked for
      -- claims already (the one-statement claim's, not yet written), passed over as taken.
      DROP FUNCTION svcq_claim_groups(text, integer, integer, boolean);
      CREATE FUNCTION svcq_claim_groups(q text, want integer, gmax integer, fair boolean, taken0 text[] DEFAULT '{}')
        RETURNS TABLE (id text, n integer) LANGUAGE plpgsql VOLATILE ROWS 10 AS $f$
      DECLARE
        leased jsonb := '{}';
        -- Groups passed over by this call: at gmax, or their first item held by another transaction.
        skip text[] := '{}';
        -- Groups at gmax.
        at_max text[] := '{}';
        taken text[] := taken0;
        cur refcursor;
        r record;
        h record;
        t bigint;
        got integer := 0;
        saturated boolean := false;
        -- The batch: each group, its first item, and its next head.
        b_grp text[];
        b_id text[];
        b_p smallint[];
        b_o bigint[];
        b_hp smallint[];
        b_ho bigint[];
        -- The rows written for the groups served.
        u_grp text[];
        u_t bigint[];
        u_p smallint[];
        u_o bigint[];
        u_hp smallint[];
        u_ho bigint[];
        -- What the groups served in the batch bound the next one of it by: with fair, the highest
        -- priority of their next items; without, the first of their next items in claim order.
        bound_p integer;
        bound_o bigint;
        -- A group's first item and the priority and claim order of its next.
        h1_id text;
        h1_p smallint;
        h1_o bigint;
        h2_p smallint;
        h2_o bigint;
        c integer;
        locked text[];
        rows_read integer;
      BEGIN
        IF want <= 0 OR EXISTS (SELECT 1 FROM svcq_queues WHERE key = q AND paused) THEN
          RETURN;
        END IF;
        IF EXISTS (SELECT 1 FROM svcq_group_wakes w WHERE w.queue = q) THEN
          PERFORM svcq_fold_groups(q);
        END IF;
        IF gmax IS NOT NULL THEN
          -- Leased items by group: read through svcq_items_leases, as many as are leased.
          SELECT coalesce(jsonb_object_agg(x.k, x.c), '{}'), coalesce(array_agg(x.k) FILTER (WHERE x.c >= gmax), '{}') INTO leased, at_max FROM (
            SELECT coalesce(i.grp, '') AS k, count(*) AS c FROM svcq_items i
             WHERE i.queue = q AND i.status IN ('claimed', 'processing') GROUP BY 1) AS x;
          skip := at_max;
        END IF;
        WHILE got < want LOOP
          b_grp := '{}'; b_id := '{}'; b_p := '{}'; b_o := '{}'; b_hp := '{}'; b_ho := '{}';
          bound_p := NULL; bound_o := NULL;
          rows_read := 0;
          -- Each group's first two items by a subquery of the select list (a SubPlan, run for
          -- each group the walk returns): never turned into a join that reads the queue's items.
          IF fair THEN
            OPEN cur FOR SELECT s.grp, s.head_p, s.head_ord, (
                SELECT jsonb_agg(jsonb_build_array(i.id, i.priority, i.ord) ORDER BY (-i.priority), i.ord) FROM (
                  SELECT i.id, i.priority, i.ord FROM svcq_items i
                   WHERE i.queue = q AND coalesce(i.grp, '') = s.grp AND i.status = 'pending' AND i.available_at = 0 AND i.id <> ALL (taken)
                   ORDER BY (-i.priority), i.ord LIMIT 2) AS i) AS its
              FROM svcq_groups s
             WHERE s.queue = q AND s.head_p IS NOT NULL AND s.grp <> ALL (skip)
             ORDER BY (-s.head_p), s.turn, s.head_ord LIMIT want - got;
          ELSE
            OPEN cur FOR SELECT s.grp, s.head_p, s.head_ord, (
                SELECT jsonb_agg(jsonb_build_array(i.id, i.priority, i.ord) ORDER BY (-i.priority), i.ord) FROM (
                  SELECT i.id, i.priority, i.ord FROM svcq_items i
                   WHERE i.queue = q AND coalesce(i.grp, '') = s.grp AND i.status = 'pending' AND i.available_at = 0 AND i.id <> ALL (taken)
                   ORDER BY (-i.priority), i.ord LIMIT 2) AS i) AS its
              FROM svcq_groups s
             WHERE s.queue = q AND s.head_p IS NOT NULL AND s.grp <> ALL (skip)
             ORDER BY (-s.head_p), s.head_ord LIMIT want - got;
          END IF;
          LOOP
            FETCH cur INTO r;
            EXIT WHEN NOT FOUND;
            rows_read := rows_read + 1;
            IF r.its IS NULL THEN
              -- No claimable item left (taken, cancelled): the row is put right; the batch ends here.
              IF NOT svcq_put_group_right(q, r.grp, taken) THEN
                skip := skip || r.grp;
              END IF;
              EXIT;
            END IF;
            h1_id := r.its -> 0 ->> 0;
            h1_p := (r.its -> 0 ->> 1)::smallint;
            h1_o := (r.its -> 0 ->> 2)::bigint;
            h2_p := (r.its -> 1 ->> 1)::smallint;
            h2_o := (r.its -> 1 ->> 2)::bigint;
            IF h1_p <> r.head_p OR h1_o <> r.head_ord THEN
              -- What the row said is out of date (an item taken, cancelled, or made claimable
              -- again): put right (or, held by another transaction, left out of this call), and
              -- the next batch picks again from here.
              IF NOT svcq_put_group_right(q, r.grp, taken) THEN
                skip := skip || r.grp;
              END IF;
              EXIT;
            END IF;
            -- A group served earlier in the batch comes back ahead of this one: the next batch.
            EXIT WHEN bound_p IS NOT NULL AND (CASE WHEN fair THEN r.head_p < bound_p ELSE ((-r.head_p), r.head_ord) > ((-bound_p), bound_o) END);
            b_grp := b_grp || r.grp;
            b_id := b_id || h1_id;
            b_p := b_p || h2_p;
            b_o := b_o || h2_o;
            b_hp := b_hp || h1_p;
            b_ho := b_ho || h1_o;
            IF h2_p IS NOT NULL AND (gmax IS NULL OR coalesce((leased ->> r.grp)::integer, 0) + 1 < gmax) THEN
              IF bound_p IS NULL OR (CASE WHEN fair THEN h2_p > bound_p ELSE ((-h2_p), h2_o) < ((-bound_p), bound_o) END) THEN
                bound_p := h2_p;
                bound_o := h2_o;
              END IF;
            END IF;
          END LOOP;
          CLOSE cur;
          IF rows_read = 0 THEN
            -- Nothing known: an item made claimable without a wake (by a node that did not yet
            -- know the queue's groups) is found here. Only when no group was passed over, so
            -- that this never walks the items of a saturated group.
            EXIT WHEN cardinality(skip) > 0;
            SELECT coalesce(i.grp, '') AS grp, i.priority, i.ord INTO h FROM svcq_items i
             WHERE i.queue = q AND i.status = 'pending' AND i.available_at = 0 AND i.id <> ALL (taken)
             ORDER BY (-i.priority), i.ord LIMIT 1;
            EXIT WHEN NOT FOUND;
            INSERT INTO svcq_groups AS s (queue, grp, head_p, head_ord) VALUES (q, h.grp, h.priority, h.ord)
              ON CONFLICT (queue, grp) DO UPDATE SET head_p = EXCLUDED.head_p, head_ord = EXCLUDED.head_ord;
            CONTINUE;
          END IF;
          CONTINUE WHEN cardinality(b_id) = 0;
          -- The condition is tested as (…) IS TRUE, which no partial index's predicate is proved
          -- from: written plainly, the planner may walk a whole partial index of the queue's
          -- claimable items (a million rows) to find the ids, instead of probing the primary key.
          SELECT coalesce(array_agg(x.id), '{}') INTO locked FROM (
            SELECT i.id FROM svcq_items i WHERE i.queue = q AND i.id = ANY (b_id) AND (i.status = 'pending' AND i.available_at = 0) IS TRUE
               FOR UPDATE SKIP LOCKED) AS x;
          u_grp := '{}'; u_t := '{}'; u_p := '{}'; u_o := '{}'; u_hp := '{}'; u_ho := '{}';
          FOR c IN 1 .. cardinality(b_id) LOOP
            IF NOT (b_id[c] = ANY (locked)) THEN
              -- Held by another transaction (a cancel, a sweep): the group sits this claim out.
              skip := skip || b_grp[c];
              CONTINUE;
            END IF;
            got := got + 1;
            t := nextval('svcq_turns');
            taken := taken || b_id[c];
            leased := jsonb_set(leased, ARRAY[b_grp[c]], to_jsonb(coalesce((leased ->> b_grp[c])::integer, 0) + 1));
            IF gmax IS NOT NULL AND (leased ->> b_grp[c])::integer >= gmax THEN
              skip := skip || b_grp[c];
              at_max := at_max || b_grp[c];
            END IF;
            u_grp := u_grp || b_grp[c];
            u_t := u_t || t;
            u_p := u_p || b_p[c];
            u_o := u_o || b_o[c];
            u_hp := u_hp || b_hp[c];
            u_ho := u_ho || b_ho[c];
            id := b_id[c];
            n := got;
            RETURN NEXT;
          END LOOP;
          IF cardinality(u_grp) > 0 THEN
            -- By primary key (grp = ANY): a join with the arrays has a generic plan that reads
            -- every group of the queue. A row whose head changed since the walk read it was
            -- folded a better head by another transaction (the only write another makes to a
            -- row whose first item this one holds): that head stays.
            UPDATE svcq_groups s SET turn = CASE WHEN fair THEN u_t[array_position(u_grp, s.grp)] ELSE s.turn END,
                   head_p = CASE WHEN s.head_p IS NOT NULL AND (s.head_p, s.head_ord) IS DISTINCT FROM (u_hp[array_position(u_grp, s.grp)], u_ho[array_position(u_grp, s.grp)])
                                 THEN s.head_p ELSE u_p[array_position(u_grp, s.grp)] END,
                   head_ord = CASE WHEN s.head_p IS NOT NULL AND (s.head_p, s.head_ord) IS DISTINCT FROM (u_hp[array_position(u_grp, s.grp)], u_ho[array_position(u_grp, s.grp)])
                                 THEN s.head_ord ELSE u_o[array_position(u_grp, s.grp)] END
             WHERE s.queue = q AND s.grp = ANY (u_grp);
          END IF;
        END LOOP;
        IF got < want AND cardinality(at_max) > 0 THEN
          -- A group at gmax holds the claim back only if it holds a claimable item.
          saturated := EXISTS (SELECT 1 FROM unnest(at_max) AS f(g) WHERE EXISTS (
            SELECT 1 FROM svcq_items i WHERE i.queue = q AND coalesce(i.grp, '') = f.g AND i.status = 'pending' AND i.available_at = 0 AND i.id <> ALL (taken)));
          IF saturated THEN
            id := NULL;
            n := got + 1;
            RETURN NEXT;
          END IF;
        END IF;
      END
      $f$;
    `,
  },
];

/** Any constant the whole database agrees on: the lock that serialises migrations across nodes. */
const MIGRATION_LOCK = 0x73766371; // 'svcq'

/**
 * Brings the schema up to the newest migration. Runs under a session advisory lock, so nodes
 * that start at once take turns: the first applies what is missing, the others then find
 * nothing to do. Each migration is applied in its own transaction together with its row in
 * `svcq_migrations`, so a crash leaves the schema at a whole version.
 */
export async function migrate(client: pg.ClientBase, migrations: readonly Migration[] = MIGRATIONS): Promise<number[]> {
  const applied: number[] = [];
  await client.query('SELECT pg_advisory_lock($1)', [MIGRATION_LOCK]);
  try {
    await client.query(`CREATE TABLE IF NOT EXISTS svcq_migrations (
      version     integer PRIMARY KEY,
      description text NOT NULL,
      applied_at  timestamptz NOT NULL DEFAULT now()
    )`);
    const done = new Set((await client.query<{ version: number }>('SELECT version FROM svcq_migrations')).rows.map((r) => r.version));
    for (const m of migrations) {
      if (done.has(m.version)) continue;
      await client.query('BEGIN');
      try {
        await client.query(m.sql);
        await client.query('INSERT INTO svcq_migrations (version, description) VALUES ($1, $2)', [m.version, m.description]);
        await client.query('COMMIT');
      } catch (err) {
        await client.query('ROLLBACK').catch(() => undefined);
        throw new Error(`schema migration ${m.version} (${m.description}) failed: ${(err as Error).message}`, { cause: err });
      }
      applied.push(m.version);
    }
    const newest = Math.max(0, ...done, ...applied);
    const known = Math.max(0, ...migrations.map((m) => m.version));
    if (newest > known) throw new Error(`the database's schema is at version ${newest}, newer than this build knows (${known}): upgrade svcq on this node`);
  } finally {
    await client.query('SELECT pg_advisory_unlock($1)', [MIGRATION_LOCK]).catch(() => undefined);
  }
  return applied;
}
