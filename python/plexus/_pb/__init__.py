"""The gRPC stubs, generated from ``proto/proto/plexus.proto`` when the package is built (see
``setup.py``); they are not kept in git. ``pb`` holds the messages and enums, ``pb_grpc`` the
service stubs."""

try:
    from . import plexus_pb2 as pb
    from . import plexus_pb2_grpc as pb_grpc
except ImportError as e:  # pragma: no cover - only a source tree that was never built
    raise ImportError(
        f"the gRPC stubs of plexus are missing ({e}): they are generated when the package is built; "
        "install it with `pip install ./python` (or `scripts/python-client.sh`) rather than importing the source tree"
    ) from e

__all__ = ["pb", "pb_grpc"]
