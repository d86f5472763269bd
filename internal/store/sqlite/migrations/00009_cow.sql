-- +goose Up
-- A checkpoint taken as a btrfs snapshot is recorded at once, with no
-- manifest ('[]'), and stored in the blob store in the background:
-- store_time says when its manifest and chunks were flushed ('' while
-- they are not). Checkpoints made before were stored when recorded.
ALTER TABLE checkpoints ADD COLUMN store_time TEXT NOT NULL DEFAULT '';
UPDATE checkpoints SET store_time = create_time;

-- +goose Down
ALTER TABLE checkpoints DROP COLUMN store_time;
