-- +goose Up
-- sbxd nodes sharing this database. A row is a lease: the node renews
-- lease_expire_time by heartbeats; epoch goes up at each join, and a
-- node whose epoch was taken over is fenced.
CREATE TABLE nodes (
    name              TEXT PRIMARY KEY,
    url               TEXT NOT NULL,
    host_id           TEXT NOT NULL,
    version           TEXT NOT NULL,
    protocol          INTEGER NOT NULL,
    epoch             BIGINT NOT NULL,
    -- 'active' while its sbxd runs, 'stopped' once it left cleanly.
    state             TEXT NOT NULL,
    -- Set by a drain: the node takes no new sandboxes, across restarts.
    draining          BOOLEAN NOT NULL DEFAULT false,
    join_time         TIMESTAMPTZ NOT NULL,
    heartbeat_time    TIMESTAMPTZ NOT NULL,
    lease_expire_time TIMESTAMPTZ NOT NULL,
    capacity          JSONB NOT NULL
);

-- The node a sandbox runs on, or that suspended it.
ALTER TABLE sandboxes ADD COLUMN node TEXT NOT NULL DEFAULT '';
CREATE INDEX sandboxes_node ON sandboxes (node);

-- The node whose journal entry it is, which recovers it after a crash.
ALTER TABLE operations ADD COLUMN node TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE operations DROP COLUMN node;
DROP INDEX sandboxes_node;
ALTER TABLE sandboxes DROP COLUMN node;
DROP TABLE nodes;
