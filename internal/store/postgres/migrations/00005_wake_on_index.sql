-- +goose Up
-- An event's post reads the sandboxes waiting on its key, not all of them.
CREATE INDEX sandboxes_wake_on ON sandboxes (wake_on) WHERE wake_on <> '';

-- +goose Down
DROP INDEX sandboxes_wake_on;
