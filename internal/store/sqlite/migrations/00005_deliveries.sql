-- +goose Up
CREATE TABLE deliveries (
    seq            INTEGER PRIMARY KEY,
    id             TEXT NOT NULL UNIQUE,
    name           TEXT NOT NULL DEFAULT '',
    sandbox_id     TEXT NOT NULL,
    sandbox_name   TEXT NOT NULL,
    archive_digest TEXT NOT NULL,
    archive_bytes  INTEGER NOT NULL,
    chunks         TEXT NOT NULL,
    files          INTEGER NOT NULL,
    envelope       BLOB NOT NULL,
    digest         TEXT NOT NULL,
    previous       TEXT NOT NULL DEFAULT '',
    metadata       BLOB,
    create_time    TEXT NOT NULL
);
CREATE INDEX deliveries_sandbox ON deliveries(sandbox_id);

-- +goose Down
DROP TABLE deliveries;
