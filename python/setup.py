"""Build steps of plexus-client that pyproject.toml cannot declare.

The gRPC stubs are not kept in git: every build compiles the one contract,
``proto/proto/plexus.proto`` of the repository, with ``grpc_tools.protoc`` into
``plexus/_pb/plexus_pb2.py``, ``plexus_pb2.pyi`` and ``plexus_pb2_grpc.py``. The proto is
copied under a ``plexus/_pb/`` include path first, so that the generated service module imports
its messages as ``from plexus._pb import plexus_pb2`` rather than as a top-level module.

Where the proto is found, first match wins:

* ``$PLEXUS_PROTO`` (a file), for builds from anywhere else;
* ``../proto/proto/plexus.proto``: building from the repository (``pip install ./python``; pip
  builds a local directory in place since 21.3);
* ``proto/plexus.proto``: building from an sdist, into which the ``sdist`` step below copies it.

Generated code checks its runtime: ``plexus_pb2`` refuses a protobuf older than the compiler
that wrote it, ``plexus_pb2_grpc`` a grpcio older than grpcio-tools. So the dependencies are
computed here from the compiler actually used, not written down by hand.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import tempfile
from importlib import metadata
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = Path(__file__).resolve().parent
GENERATED = ("plexus_pb2.py", "plexus_pb2.pyi", "plexus_pb2_grpc.py")


def find_proto() -> Path:
    env = os.environ.get("PLEXUS_PROTO")
    candidates = [Path(env)] if env else []
    candidates += [HERE.parent / "proto" / "proto" / "plexus.proto", HERE / "proto" / "plexus.proto"]
    for c in candidates:
        if c.is_file():
            return c
    raise SystemExit(
        "plexus-client: cannot find plexus.proto (looked at "
        + ", ".join(str(c) for c in candidates)
        + "): build from the repository's python/ directory (pip >= 21.3 builds it in place), "
        "from an sdist made by `python -m build --sdist python`, or set PLEXUS_PROTO to the file"
    )


class _Stubs:
    """The stubs, generated once per build process into a temporary directory."""

    def __init__(self) -> None:
        self._dir: Path | None = None
        self.protobuf_version = ""

    def dir(self) -> Path:
        if self._dir is None:
            self._dir = self._generate()
        return self._dir

    def _generate(self) -> Path:
        try:
            import grpc_tools
            from grpc_tools import protoc
        except ImportError as e:
            raise SystemExit(
                f"plexus-client: grpcio-tools is needed to build the package ({e}); "
                "pip installs it by itself unless --no-build-isolation is given"
            ) from e
        proto = find_proto()
        work = Path(tempfile.mkdtemp(prefix="plexus-pb-"))
        atexit.register(shutil.rmtree, work, True)
        src, out = work / "src", work / "out"
        (src / "plexus" / "_pb").mkdir(parents=True)
        out.mkdir()
        shutil.copyfile(proto, src / "plexus" / "_pb" / "plexus.proto")
        well_known = Path(grpc_tools.__file__).parent / "_proto"
        code = protoc.main(
            [
                "grpc_tools.protoc",
                f"-I{src}",
                f"-I{well_known}",
                f"--python_out={out}",
                f"--pyi_out={out}",
                f"--grpc_python_out={out}",
                str(src / "plexus" / "_pb" / "plexus.proto"),
            ]
        )
        if code != 0:
            raise SystemExit(f"plexus-client: protoc failed on {proto} (exit {code})")
        generated = out / "plexus" / "_pb"
        header = (generated / "plexus_pb2.py").read_text(encoding="utf-8")
        m = re.search(r"^# Protobuf Python Version: (\d+)\.(\d+)\.(\d+)", header, re.M)
        if m is None:
            raise SystemExit("plexus-client: the generated plexus_pb2.py does not say its protobuf version")
        self.protobuf_version = ".".join(m.groups())
        return generated

    def copy_into(self, package_dir: Path) -> None:
        package_dir.mkdir(parents=True, exist_ok=True)
        for name in GENERATED:
            shutil.copyfile(self.dir() / name, package_dir / name)


STUBS = _Stubs()


def requirements() -> list[str]:
    STUBS.dir()
    major = int(STUBS.protobuf_version.split(".")[0])
    grpc_tools_version = metadata.version("grpcio-tools")
    return [
        f"grpcio>={grpc_tools_version}",
        f"protobuf>={STUBS.protobuf_version},<{major + 1}",
        "tqdm>=4.60",
        # BLAKE3, the content address of a working_dir archive (the coordinator's).
        "blake3>=0.3",
    ]


class BuildPyWithStubs(build_py):
    """``build_py``, plus the stubs written into the built package (and, for an editable
    install, into the source tree, which is what an editable install imports)."""

    def run(self) -> None:
        super().run()
        STUBS.copy_into(Path(self.build_lib) / "plexus" / "_pb")
        if getattr(self, "editable_mode", False):
            STUBS.copy_into(HERE / "plexus" / "_pb")

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        extra = [str(Path(self.build_lib) / "plexus" / "_pb" / name) for name in GENERATED]
        return list(super().get_outputs(include_bytecode)) + extra


class SdistWithProto(sdist):
    """``sdist``, with the proto copied in so that a wheel can be built from the sdist alone."""

    def make_release_tree(self, base_dir: str, files: list[str]) -> None:
        super().make_release_tree(base_dir, files)
        dest = Path(base_dir) / "proto" / "plexus.proto"
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(find_proto(), dest)


setup(
    install_requires=requirements(),
    cmdclass={"build_py": BuildPyWithStubs, "sdist": SdistWithProto},
)
