-- +goose Up
-- API keys as records (docs/api.md "API keys and tenants"). The secret is
-- never stored: hash is the hex SHA-256 of it. revoke_time is '' while the
-- key is live; a live key's name is unique. daily_limit_usd NULL: no limit.
CREATE TABLE api_keys (
    id              TEXT PRIMARY KEY,
    name            TEXT NOT NULL,
    hash            TEXT NOT NULL UNIQUE,
    labels          TEXT NOT NULL DEFAULT '{}',
    admin           INTEGER NOT NULL DEFAULT 0,
    daily_limit_usd REAL,
    create_time     TEXT NOT NULL,
    revoke_time     TEXT NOT NULL DEFAULT ''
);
CREATE UNIQUE INDEX api_keys_live_name ON api_keys(name) WHERE revoke_time = '';

-- The owner of each object: the id of the API key that made it; '' for the
-- operator (the Unix socket, keys given with --api-key) and for everything
-- made before keys were records.
ALTER TABLE sandboxes ADD COLUMN owner TEXT NOT NULL DEFAULT '';
ALTER TABLE snapshots ADD COLUMN owner TEXT NOT NULL DEFAULT '';
ALTER TABLE events ADD COLUMN owner TEXT NOT NULL DEFAULT '';
ALTER TABLE images ADD COLUMN owner TEXT NOT NULL DEFAULT '';
ALTER TABLE deliveries ADD COLUMN owner TEXT NOT NULL DEFAULT '';
CREATE INDEX sandboxes_owner ON sandboxes(owner);

-- +goose Down
DROP INDEX sandboxes_owner;
ALTER TABLE deliveries DROP COLUMN owner;
ALTER TABLE images DROP COLUMN owner;
ALTER TABLE events DROP COLUMN owner;
ALTER TABLE snapshots DROP COLUMN owner;
ALTER TABLE sandboxes DROP COLUMN owner;
DROP INDEX api_keys_live_name;
DROP TABLE api_keys;
