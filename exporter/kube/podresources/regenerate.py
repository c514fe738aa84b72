"""Developer tool: regenerate the committed PodResources stubs from ``api.proto``.

Run ``python -m exporter.kube.podresources.regenerate`` after editing ``api.proto``. The stubs
are committed so that the exporter needs neither protoc nor grpcio-tools at runtime; a test
regenerates them into a temporary directory and fails when they differ from the committed
files, so the proto and the stubs cannot drift apart. grpcio-tools is used as a library
(``grpc_tools.protoc.main``), never as a subprocess. The exporter itself never imports this
module.

The proto is compiled with the repository root as include path, so the generated gRPC module
imports ``exporter.kube.podresources.api_pb2`` by its package path, while the proto package
stays ``v1`` and the method paths stay ``/v1.PodResourcesLister/...`` as the kubelet serves them.
"""

from __future__ import annotations

import sys
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
REPOSITORY_ROOT = PACKAGE_DIR.parents[2]
PROTO = PACKAGE_DIR / "api.proto"
GENERATED = ("api_pb2.py", "api_pb2_grpc.py", "api_pb2.pyi")


def regenerate(output_root: Path) -> list[Path]:
    """Compile ``api.proto`` into ``output_root`` (mirroring the package path); return the files."""
    from grpc_tools import protoc  # type: ignore[import-untyped]  # noqa: PLC0415 - dev-only dependency

    relative = PROTO.relative_to(REPOSITORY_ROOT).as_posix()
    output_root.mkdir(parents=True, exist_ok=True)
    arguments = [
        "grpc_tools.protoc",
        f"-I{REPOSITORY_ROOT}",
        f"--python_out={output_root}",
        f"--grpc_python_out={output_root}",
        f"--pyi_out={output_root}",
        relative,
    ]
    status = protoc.main(arguments)
    if status != 0:
        raise RuntimeError(f"protoc failed with status {status} compiling {relative}")
    out_dir = output_root / PACKAGE_DIR.relative_to(REPOSITORY_ROOT)
    return [out_dir / name for name in GENERATED]


def main() -> int:
    """Regenerate the stubs in place, next to ``api.proto``."""
    written = regenerate(REPOSITORY_ROOT)
    for path in written:
        print(f"wrote {path.relative_to(REPOSITORY_ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
