-- +goose Up
ALTER TABLE sandboxes ADD COLUMN disk_source TEXT NOT NULL DEFAULT '';

CREATE TABLE checkpoints (
    sandbox_id  TEXT NOT NULL REFERENCES sandboxes(id) ON DELETE CASCADE,
    seq         INTEGER NOT NULL,
    comment     TEXT NOT NULL DEFAULT '',
    source_id   TEXT NOT NULL DEFAULT '',
    health      TEXT NOT NULL DEFAULT 'ok',
    manifest    TEXT NOT NULL,
    size_bytes  INTEGER NOT NULL DEFAULT 0,
    added_bytes INTEGER NOT NULL DEFAULT 0,
    files       INTEGER NOT NULL DEFAULT 0,
    create_time TEXT NOT NULL,
    PRIMARY KEY (sandbox_id, seq)
);

-- The operation journal: an operation that must finish or roll back after
-- a crash writes its intent here first and deletes it when done.
CREATE TABLE operations (
    id          TEXT PRIMARY KEY,
    sandbox_id  TEXT NOT NULL,
    kind        TEXT NOT NULL,
    data        TEXT NOT NULL DEFAULT '{}',
    create_time TEXT NOT NULL
);

-- +goose Down
DROP TABLE operations;
DROP TABLE checkpoints;
ALTER TABLE sandboxes DROP COLUMN disk_source;
