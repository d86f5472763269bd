-- +goose Up
CREATE TABLE snapshots (
    id           TEXT PRIMARY KEY,
    name         TEXT NOT NULL DEFAULT '',
    sandbox_id   TEXT NOT NULL,
    sandbox_name TEXT NOT NULL,
    image        TEXT NOT NULL,
    image_id     TEXT NOT NULL,
    shape        TEXT NOT NULL DEFAULT '{}',
    memory       TEXT NOT NULL DEFAULT '[]',
    disk         TEXT NOT NULL DEFAULT '[]',
    memory_bytes INTEGER NOT NULL DEFAULT 0,
    disk_bytes   INTEGER NOT NULL DEFAULT 0,
    stored_bytes INTEGER NOT NULL DEFAULT 0,
    metadata     TEXT NOT NULL DEFAULT 'null',
    fork         INTEGER NOT NULL DEFAULT 0,
    state        TEXT NOT NULL DEFAULT 'ready',
    create_time  TEXT NOT NULL,
    expire_time  TEXT NOT NULL DEFAULT ''
);
CREATE INDEX snapshots_sandbox ON snapshots(sandbox_id);

-- +goose Down
DROP TABLE snapshots;
