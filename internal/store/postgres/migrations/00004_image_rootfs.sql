-- +goose Up
-- The root filesystems of images, as manifests in the shared blob store:
-- a node that has not unpacked an image fetches it from there. Keyed by
-- image id (a rebuilt image gets a new id; sandboxes keep the old one).
CREATE TABLE image_rootfs (
    image_id    TEXT PRIMARY KEY,
    manifest    JSONB NOT NULL,
    size_bytes  BIGINT NOT NULL,
    create_time TIMESTAMPTZ NOT NULL
);

-- +goose Down
DROP TABLE image_rootfs;
