-- +goose Up
-- The schema of sbx's records on PostgreSQL: the same records as the SQLite
-- store's (internal/store/sqlite/migrations), in PostgreSQL's types. Times
-- are TIMESTAMPTZ (NULL for "never"), JSON that sbx decodes is JSONB, bytes
-- that must come back exactly as written (journal data, memory image
-- records, envelopes, callers' metadata, event bodies) are BYTEA. Ids and
-- names sort bytewise (COLLATE "C"), as they do in SQLite.
CREATE TABLE sandboxes (
    id               TEXT COLLATE "C" PRIMARY KEY,
    name             TEXT COLLATE "C" NOT NULL CONSTRAINT sandboxes_name_key UNIQUE,
    state            TEXT NOT NULL,
    state_reason     TEXT NOT NULL DEFAULT '',
    image            TEXT NOT NULL,
    image_id         TEXT NOT NULL DEFAULT '',
    cpus             DOUBLE PRECISION NOT NULL,
    memory_mb        INTEGER NOT NULL,
    disk_mb          INTEGER NOT NULL DEFAULT 0,
    env              JSONB NOT NULL DEFAULT '{}',
    labels           JSONB NOT NULL DEFAULT '{}',
    network          JSONB NOT NULL DEFAULT '{}',
    volumes          JSONB NOT NULL DEFAULT '[]',
    timeout_ms       BIGINT NOT NULL DEFAULT 0,
    source_sandbox   TEXT NOT NULL DEFAULT '',
    source_snapshot  TEXT NOT NULL DEFAULT '',
    disk_source      TEXT NOT NULL DEFAULT '',
    pooled           BOOLEAN NOT NULL DEFAULT false,
    suspend_snapshot TEXT NOT NULL DEFAULT '',
    wake_on          TEXT NOT NULL DEFAULT '',
    keep_alive       BOOLEAN NOT NULL DEFAULT false,
    suspend_time     TIMESTAMPTZ,
    owner            TEXT COLLATE "C" NOT NULL DEFAULT '',
    -- store.SecretSet (values sealed by internal/secret); NULL for none.
    secrets          JSONB,
    create_time      TIMESTAMPTZ NOT NULL,
    update_time      TIMESTAMPTZ NOT NULL
);
CREATE INDEX sandboxes_owner ON sandboxes(owner);
CREATE INDEX sandboxes_source_snapshot ON sandboxes(source_snapshot) WHERE source_snapshot <> '';

CREATE TABLE images (
    name        TEXT COLLATE "C" PRIMARY KEY,
    id          TEXT NOT NULL,
    digest      TEXT NOT NULL,
    source      TEXT NOT NULL,
    size_bytes  BIGINT NOT NULL,
    env         JSONB NOT NULL DEFAULT '[]',
    create_time TIMESTAMPTZ NOT NULL,
    owner       TEXT NOT NULL DEFAULT ''
);

CREATE TABLE checkpoints (
    sandbox_id  TEXT COLLATE "C" NOT NULL REFERENCES sandboxes(id) ON DELETE CASCADE,
    seq         INTEGER NOT NULL,
    comment     TEXT NOT NULL DEFAULT '',
    source_id   TEXT NOT NULL DEFAULT '',
    health      TEXT NOT NULL DEFAULT 'ok',
    manifest    JSONB NOT NULL DEFAULT '[]',
    size_bytes  BIGINT NOT NULL DEFAULT 0,
    added_bytes BIGINT NOT NULL DEFAULT 0,
    files       BIGINT NOT NULL DEFAULT 0,
    create_time TIMESTAMPTZ NOT NULL,
    -- When the manifest and chunks were flushed to the blob store; NULL
    -- while they are not (a btrfs snapshot checkpoint stored later).
    store_time  TIMESTAMPTZ,
    PRIMARY KEY (sandbox_id, seq)
);

-- The operation journal: an operation that must finish or roll back after
-- a crash writes its intent here first and deletes it when done.
CREATE TABLE operations (
    id          TEXT COLLATE "C" PRIMARY KEY,
    sandbox_id  TEXT NOT NULL,
    kind        TEXT NOT NULL,
    data        BYTEA NOT NULL,
    create_time TIMESTAMPTZ NOT NULL
);

CREATE TABLE snapshots (
    id           TEXT COLLATE "C" PRIMARY KEY,
    name         TEXT NOT NULL DEFAULT '',
    sandbox_id   TEXT COLLATE "C" NOT NULL,
    sandbox_name TEXT NOT NULL,
    image        TEXT NOT NULL,
    image_id     TEXT NOT NULL,
    shape        BYTEA NOT NULL,
    memory       BYTEA NOT NULL,
    disk         JSONB NOT NULL DEFAULT '[]',
    memory_bytes BIGINT NOT NULL DEFAULT 0,
    disk_bytes   BIGINT NOT NULL DEFAULT 0,
    stored_bytes BIGINT NOT NULL DEFAULT 0,
    metadata     BYTEA,
    fork         BOOLEAN NOT NULL DEFAULT false,
    suspend      BOOLEAN NOT NULL DEFAULT false,
    state        TEXT NOT NULL DEFAULT 'ready',
    create_time  TIMESTAMPTZ NOT NULL,
    expire_time  TIMESTAMPTZ,
    owner        TEXT NOT NULL DEFAULT ''
);
CREATE INDEX snapshots_sandbox ON snapshots(sandbox_id);

-- seq orders events by insertion (store.Event.Seq).
CREATE TABLE events (
    seq          BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,
    id           TEXT COLLATE "C" PRIMARY KEY,
    key          TEXT NOT NULL,
    sandbox_id   TEXT NOT NULL DEFAULT '',
    data         BYTEA NOT NULL,
    content_type TEXT NOT NULL DEFAULT '',
    create_time  TIMESTAMPTZ NOT NULL,
    deliver_time TIMESTAMPTZ,
    expire_time  TIMESTAMPTZ,
    owner        TEXT NOT NULL DEFAULT ''
);
CREATE INDEX events_key ON events(key, sandbox_id);
CREATE INDEX events_sandbox ON events(sandbox_id);

CREATE TABLE deliveries (
    seq            BIGINT PRIMARY KEY,
    id             TEXT NOT NULL UNIQUE,
    name           TEXT NOT NULL DEFAULT '',
    sandbox_id     TEXT NOT NULL,
    sandbox_name   TEXT NOT NULL,
    archive_digest TEXT NOT NULL,
    archive_bytes  BIGINT NOT NULL,
    chunks         JSONB NOT NULL,
    files          BIGINT NOT NULL,
    envelope       BYTEA NOT NULL,
    digest         TEXT NOT NULL,
    previous       TEXT NOT NULL DEFAULT '',
    metadata       BYTEA,
    create_time    TIMESTAMPTZ NOT NULL,
    owner          TEXT NOT NULL DEFAULT ''
);
CREATE INDEX deliveries_sandbox ON deliveries(sandbox_id);

-- API keys (docs/api.md "API keys and tenants"): hash is the hex SHA-256
-- of the secret, never the secret. A live key (revoke_time NULL) has a
-- unique name. daily_limit_usd NULL: no limit.
CREATE TABLE api_keys (
    id              TEXT COLLATE "C" PRIMARY KEY,
    name            TEXT NOT NULL,
    hash            TEXT NOT NULL UNIQUE,
    labels          JSONB NOT NULL DEFAULT '{}',
    admin           BOOLEAN NOT NULL DEFAULT false,
    daily_limit_usd DOUBLE PRECISION,
    create_time     TIMESTAMPTZ NOT NULL,
    revoke_time     TIMESTAMPTZ
);
CREATE UNIQUE INDEX api_keys_live_name ON api_keys(name) WHERE revoke_time IS NULL;

-- Usage accrued by each sandbox within each UTC hour; first_time and
-- last_time bound the accrual within the hour. Rows outlive their sandbox.
CREATE TABLE usage_hours (
    sandbox_id          TEXT COLLATE "C" NOT NULL,
    hour                TIMESTAMPTZ NOT NULL,
    sandbox_name        TEXT NOT NULL DEFAULT '',
    key_id              TEXT NOT NULL DEFAULT '',
    first_time          TIMESTAMPTZ NOT NULL,
    last_time           TIMESTAMPTZ NOT NULL,
    cpu_seconds         DOUBLE PRECISION NOT NULL DEFAULT 0,
    memory_gib_seconds  DOUBLE PRECISION NOT NULL DEFAULT 0,
    stored_byte_seconds DOUBLE PRECISION NOT NULL DEFAULT 0,
    PRIMARY KEY (sandbox_id, hour)
);
CREATE INDEX usage_hours_hour ON usage_hours(hour);

-- The meter's last reading of each sandbox (sandbox_id '' is the storage
-- meter).
CREATE TABLE usage_meters (
    sandbox_id TEXT COLLATE "C" PRIMARY KEY,
    running    BOOLEAN NOT NULL DEFAULT false,
    cpu_nanos  BIGINT NOT NULL DEFAULT 0,
    read_time  TIMESTAMPTZ NOT NULL
);

-- Sandboxes that a key's daily spending limit suspended.
CREATE TABLE limit_suspensions (
    sandbox_id   TEXT COLLATE "C" PRIMARY KEY,
    key_id       TEXT NOT NULL,
    resume       BOOLEAN NOT NULL DEFAULT false,
    suspend_time TIMESTAMPTZ NOT NULL
);

-- +goose Down
DROP TABLE limit_suspensions;
DROP TABLE usage_meters;
DROP TABLE usage_hours;
DROP TABLE api_keys;
DROP TABLE deliveries;
DROP TABLE events;
DROP TABLE snapshots;
DROP TABLE operations;
DROP TABLE checkpoints;
DROP TABLE images;
DROP TABLE sandboxes;
