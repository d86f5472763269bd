-- +goose Up
-- A sandbox's secrets (store.SecretSet as JSON; values sealed by
-- internal/secret, never in the clear); '' when it has none.
ALTER TABLE sandboxes ADD COLUMN secrets TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE sandboxes DROP COLUMN secrets;
