-- +goose Up
CREATE TABLE sandboxes (
    id              TEXT PRIMARY KEY,
    name            TEXT NOT NULL UNIQUE,
    state           TEXT NOT NULL,
    state_reason    TEXT NOT NULL DEFAULT '',
    image           TEXT NOT NULL,
    image_id        TEXT NOT NULL DEFAULT '',
    cpus            REAL NOT NULL,
    memory_mb       INTEGER NOT NULL,
    disk_mb         INTEGER NOT NULL DEFAULT 0,
    env             TEXT NOT NULL DEFAULT '{}',
    labels          TEXT NOT NULL DEFAULT '{}',
    network         TEXT NOT NULL DEFAULT '{}',
    volumes         TEXT NOT NULL DEFAULT '[]',
    timeout_ms      INTEGER NOT NULL DEFAULT 0,
    source_sandbox  TEXT NOT NULL DEFAULT '',
    source_snapshot TEXT NOT NULL DEFAULT '',
    pooled          INTEGER NOT NULL DEFAULT 0,
    create_time     TEXT NOT NULL,
    update_time     TEXT NOT NULL
);

CREATE TABLE images (
    name        TEXT PRIMARY KEY,
    id          TEXT NOT NULL,
    digest      TEXT NOT NULL,
    source      TEXT NOT NULL,
    size_bytes  INTEGER NOT NULL,
    env         TEXT NOT NULL DEFAULT '[]',
    create_time TEXT NOT NULL
);

-- +goose Down
DROP TABLE images;
DROP TABLE sandboxes;
