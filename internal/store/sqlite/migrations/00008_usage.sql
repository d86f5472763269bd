-- +goose Up
-- Usage accrued by each sandbox within each UTC hour (hour: RFC 3339 of
-- the hour's start). first_time and last_time bound the accrual within
-- the hour, so a query may prorate a partial hour. Rows outlive their
-- sandbox: usage is billed after a delete.
CREATE TABLE usage (
    sandbox_id          TEXT NOT NULL,
    hour                TEXT NOT NULL,
    sandbox_name        TEXT NOT NULL DEFAULT '',
    key_id              TEXT NOT NULL DEFAULT '',
    first_time          TEXT NOT NULL,
    last_time           TEXT NOT NULL,
    cpu_seconds         REAL NOT NULL DEFAULT 0,
    memory_gib_seconds  REAL NOT NULL DEFAULT 0,
    stored_byte_seconds REAL NOT NULL DEFAULT 0,
    PRIMARY KEY (sandbox_id, hour)
);
CREATE INDEX usage_hour ON usage(hour);

-- The meter's last reading of each sandbox (sandbox_id '' is the storage
-- meter): a restart of sbxd accrues from here, losing nothing.
CREATE TABLE usage_meters (
    sandbox_id TEXT PRIMARY KEY,
    running    INTEGER NOT NULL DEFAULT 0,
    cpu_nanos  INTEGER NOT NULL DEFAULT 0,
    time       TEXT NOT NULL
);

-- Sandboxes that a key's daily spending limit suspended; resume: resume
-- them once the key is under its limit again (the limit raised or the UTC
-- day turned), as PUT /v1/keys/{id}/limit with resume_suspended asked.
CREATE TABLE limit_suspensions (
    sandbox_id TEXT PRIMARY KEY,
    key_id     TEXT NOT NULL,
    resume     INTEGER NOT NULL DEFAULT 0,
    time       TEXT NOT NULL
);

-- +goose Down
DROP TABLE limit_suspensions;
DROP TABLE usage_meters;
DROP TABLE usage;
