-- +goose Up
ALTER TABLE sandboxes ADD COLUMN suspend_snapshot TEXT NOT NULL DEFAULT '';
ALTER TABLE sandboxes ADD COLUMN wake_on TEXT NOT NULL DEFAULT '';
ALTER TABLE sandboxes ADD COLUMN keep_alive INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sandboxes ADD COLUMN suspend_time TEXT NOT NULL DEFAULT '';
ALTER TABLE snapshots ADD COLUMN suspend INTEGER NOT NULL DEFAULT 0;
CREATE TABLE events (
    id           TEXT PRIMARY KEY,
    key          TEXT NOT NULL,
    sandbox_id   TEXT NOT NULL DEFAULT '',
    data         BLOB NOT NULL,
    content_type TEXT NOT NULL DEFAULT '',
    create_time  TEXT NOT NULL,
    deliver_time TEXT NOT NULL DEFAULT '',
    expire_time  TEXT NOT NULL DEFAULT ''
);
CREATE INDEX events_key ON events(key, sandbox_id);
CREATE INDEX events_sandbox ON events(sandbox_id);

-- +goose Down
DROP TABLE events;
ALTER TABLE snapshots DROP COLUMN suspend;
ALTER TABLE sandboxes DROP COLUMN suspend_time;
ALTER TABLE sandboxes DROP COLUMN keep_alive;
ALTER TABLE sandboxes DROP COLUMN wake_on;
ALTER TABLE sandboxes DROP COLUMN suspend_snapshot;
