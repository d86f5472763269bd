-- +goose Up
-- The sbxd node a sandbox runs on ('' on a single sbxd, and while it is
-- suspended). A SQLite store has one node; the column keeps its records
-- the same shape as a cluster's (the PostgreSQL store's).
ALTER TABLE sandboxes ADD COLUMN node TEXT NOT NULL DEFAULT '';

-- The node whose journal entry it is, which recovers it after a crash.
ALTER TABLE operations ADD COLUMN node TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE operations DROP COLUMN node;
ALTER TABLE sandboxes DROP COLUMN node;
