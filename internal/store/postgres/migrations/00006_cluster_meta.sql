-- +goose Up
-- Facts of the cluster as a whole, such as the digest of its cluster key
-- (nodes with another key are refused at join).
CREATE TABLE cluster_meta (
    name  TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

-- +goose Down
DROP TABLE cluster_meta;
