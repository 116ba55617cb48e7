"""The controller's snapshot of its committed image. The codec lives with the image in
`cluster/metadata/image_codec.py`, since brokers load the same snapshots (FetchSnapshot when
they are behind the controllers' log start); this name stays for the controller's callers."""

from cluster.metadata.image_codec import FORMAT_VERSION, SnapshotError, copy_image, decode_image, encode_image

__all__ = ["FORMAT_VERSION", "SnapshotError", "copy_image", "decode_image", "encode_image"]
