-- +goose Up
-- Recovery snapshots (recovery_interval_ms), kept for the records' shape
-- to match a cluster's (the PostgreSQL store's): a single sbxd takes none.
ALTER TABLE sandboxes ADD COLUMN recovery_interval_ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sandboxes ADD COLUMN recovery_snapshot TEXT NOT NULL DEFAULT '';
ALTER TABLE sandboxes ADD COLUMN recovery_time TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE sandboxes DROP COLUMN recovery_time;
ALTER TABLE sandboxes DROP COLUMN recovery_snapshot;
ALTER TABLE sandboxes DROP COLUMN recovery_interval_ms;
