-- +goose Up
-- Recovery snapshots (recovery_interval_ms): how often a running
-- sandbox's node takes one, the latest, and when it was captured.
ALTER TABLE sandboxes ADD COLUMN recovery_interval_ms BIGINT NOT NULL DEFAULT 0;
ALTER TABLE sandboxes ADD COLUMN recovery_snapshot TEXT NOT NULL DEFAULT '';
ALTER TABLE sandboxes ADD COLUMN recovery_time TIMESTAMPTZ;

-- A list read in pages (GET /v1/sandboxes?limit=) seeks by creation time
-- and id.
CREATE INDEX sandboxes_create_time_id ON sandboxes (create_time, id);

-- +goose Down
DROP INDEX sandboxes_create_time_id;
ALTER TABLE sandboxes DROP COLUMN recovery_time;
ALTER TABLE sandboxes DROP COLUMN recovery_snapshot;
ALTER TABLE sandboxes DROP COLUMN recovery_interval_ms;
