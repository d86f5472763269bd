-- +goose Up
-- A memory snapshot is recorded as soon as its image is on its node (a hot
-- image), with no memory record ('[]'), and stored in the blob store in
-- the background: store_time says when its memory image's chunks were
-- flushed (NULL while they are not). Snapshots made before were stored
-- when recorded.
ALTER TABLE snapshots ADD COLUMN store_time TIMESTAMPTZ;
UPDATE snapshots SET store_time = create_time;

-- +goose Down
ALTER TABLE snapshots DROP COLUMN store_time;
