"""`logquake image build`: the container image the Docker back end runs nodes from.

No image registry is reachable from the machines logquake runs on, and `docker pull` is never
used: every image is built here, in three tiers, each cached by the daemon under a tag that
hashes what went into it.

1. `logquake-base:<hash>`: a Debian bookworm minbase root file system made by debootstrap from
   the Debian mirror (python3 and python3-venv included), stripped of apt's package cache and
   documentation, and turned into an image with `docker import`. The tag hashes the suite,
   mirror and package list: built once per machine (about two minutes here).
2. `logquake-deps:<hash>`: the base plus the broker's dependencies (kio, crc32c, libfaketime,
   pinned as in pyproject.toml), installed by the host's pip for the image's CPython 3.11 and
   copied in as one layer. The containers on logquake's bridges have no route out, so nothing
   is installed inside the build (and no RUN step: with the vfs storage driver every
   committed step copies the whole file system). Rebuilt only when the pins change.
3. `logquake-node:<hash>`: the deps image plus the source of the packages a node runs
   (cluster/ and proxy/), compiled, on the image python's path through a .pth file; one
   layer. The tag hashes those sources: an unchanged tree reuses the image, an edited one
   builds a new layer (seconds).

Stale node images (other hashes) are removed after a build, so the images of every edit of
the source do not pile up.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

PROJECT_ROOT = Path(__file__).resolve().parent.parent
SUITE = "bookworm"
MIRROR = os.environ.get("LOGQUAKE_DEBIAN_MIRROR", "http://deb.debian.org/debian")
BASE_PACKAGES = ("python3", "python3-venv")
BASE_REPOSITORY = "logquake-base"
DEPS_REPOSITORY = "logquake-deps"
NODE_REPOSITORY = "logquake-node"
# The packages a node process imports (the import-linter contracts keep `cluster` from
# importing anything else of logquake; proxy_routing imports `proxy`).
NODE_PACKAGES = ("cluster", "proxy")
# The broker's third-party dependencies, with the pins read from pyproject.toml.
NODE_DEPENDENCIES = ("kio", "crc32c", "libfaketime")
SOURCE_DIR = "/opt/logquake/src"
# Debian's python3 looks here first for packages installed outside the distribution.
SITE_PACKAGES = "/usr/local/lib/python3.11/dist-packages"
LABEL = "org.logquake.image"
DEBOOTSTRAP_TIMEOUT_S = 1800
LOCK_PATH = "/var/tmp/logquake-image.lock"


class ImageError(RuntimeError):
    """The image could not be built; the message says which step failed and why."""


@dataclass(frozen=True)
class ImageInfo:
    tag: str
    built: bool  # False: an image with this content hash already existed
    seconds: float


def _log(message: str) -> None:
    print(f"logquake image: {message}", file=sys.stderr, flush=True)


def pinned_requirements(pyproject: Path = PROJECT_ROOT / "pyproject.toml") -> list[str]:
    """The exact pins of NODE_DEPENDENCIES in pyproject.toml's dependencies."""
    import tomllib

    dependencies = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    pins = {}
    for requirement in dependencies:
        name = re.split(r"[<>=!~ \[;]", requirement, maxsplit=1)[0].strip().lower()
        pins[name] = requirement.strip()
    missing = [name for name in NODE_DEPENDENCIES if name not in pins]
    if missing:
        raise ImageError(f"pyproject.toml has no dependency {', '.join(missing)}; the node image needs it")
    return [pins[name] for name in NODE_DEPENDENCIES]


def base_tag() -> str:
    digest = hashlib.sha256(f"{SUITE}|{MIRROR}|{','.join(BASE_PACKAGES)}|strip-v1".encode()).hexdigest()[:12]
    return f"{BASE_REPOSITORY}:{SUITE}-{digest}"


def _source_files() -> list[Path]:
    files = []
    for package in NODE_PACKAGES:
        for path in sorted((PROJECT_ROOT / package).rglob("*.py")):
            if "__pycache__" not in path.parts:
                files.append(path)
    return files


def copy_recipe(parent: str, destination: str, note: str) -> str:
    # One COPY and nothing else: with the vfs storage driver every committed step copies the
    # whole file system (seconds each, tens of seconds on a loaded machine).
    return f"FROM {parent}\n# {note}\nCOPY layer {destination}\n"


def deps_tag(base: str) -> str:
    digest = hashlib.sha256(copy_recipe(base, SITE_PACKAGES + "/", " ".join(pinned_requirements())).encode())
    return f"{DEPS_REPOSITORY}:{digest.hexdigest()[:16]}"


def node_tag(deps: str) -> str:
    digest = hashlib.sha256()
    digest.update(copy_recipe(deps, "/", "node source").encode())
    for path in _source_files():
        digest.update(str(path.relative_to(PROJECT_ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return f"{NODE_REPOSITORY}:{digest.hexdigest()[:16]}"


def _has_image(client: Any, tag: str) -> bool:
    import docker.errors

    try:
        client.images.get(tag)
        return True
    except docker.errors.ImageNotFound:
        return False


def _unmount_below(root: Path) -> None:
    """Lazily unmount whatever debootstrap left mounted inside `root` (its /proc and /sys
    when it was interrupted), deepest first, so removing the directory never walks a live
    /proc."""
    prefix = str(root.resolve()) + "/"
    try:
        with open("/proc/self/mounts") as f:
            points = [line.split()[1] for line in f if line.split()[1].startswith(prefix)]
    except OSError:
        return
    for point in sorted(points, key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True, timeout=30)


def build_base(client: Any, *, work_dir: Path, force: bool = False) -> ImageInfo:
    """Debootstrap + docker import, unless the base image exists."""
    tag = base_tag()
    started = time.monotonic()
    if not force and _has_image(client, tag):
        return ImageInfo(tag, False, time.monotonic() - started)
    debootstrap = shutil.which("debootstrap") or ("/usr/sbin/debootstrap" if os.path.exists("/usr/sbin/debootstrap") else None)
    if debootstrap is None:
        raise ImageError("debootstrap is not installed (apt-get install -y debootstrap, or scripts/ensure-debs "
                         "debootstrap:debootstrap)")
    if os.geteuid() != 0:
        raise ImageError("building the base image runs debootstrap, which needs root")
    root = work_dir / "rootfs"
    log_path = work_dir / "debootstrap.log"
    _log(f"debootstrap --variant=minbase {SUITE} from {MIRROR} into {root} (about a minute; log {log_path})")
    try:
        with open(log_path, "wb") as log:
            result = subprocess.run([debootstrap, "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}", SUITE, str(root),
                                     MIRROR], stdout=log, stderr=subprocess.STDOUT, timeout=DEBOOTSTRAP_TIMEOUT_S)
    finally:
        _unmount_below(root)
    if result.returncode != 0:
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-15:])
        raise ImageError(f"debootstrap failed with status {result.returncode}:\n{tail}")
    # What a container never needs; vfs copies the image into every container in full.
    for junk in ("var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc", "usr/share/man", "usr/share/info",
                 "usr/share/locale"):
        shutil.rmtree(root / junk, ignore_errors=True)
    _log(f"docker import {root} as {tag}")
    tar = subprocess.Popen(["tar", "-C", str(root), "--numeric-owner", "-c", "."], stdout=subprocess.PIPE)
    try:
        client.api.import_image_from_stream(tar.stdout, repository=tag.split(":")[0], tag=tag.split(":")[1],
                                            changes=[f"LABEL {LABEL}=base", "ENV LANG=C.UTF-8"])
    finally:
        tar.stdout.close()  # type: ignore[union-attr]
        tar.wait()
    if tar.returncode != 0:
        raise ImageError(f"tar of {root} failed with status {tar.returncode}")
    if not _has_image(client, tag):
        raise ImageError(f"docker import did not produce {tag}")
    return ImageInfo(tag, True, time.monotonic() - started)


def _compile(directory: Path) -> None:
    """Bytecode for the image's python (3.11, as the host's), checked by source hash: such
    .pyc files embed no mtime, so the same pins stage byte-identical files and Docker's
    build cache reuses the dependency layer instead of copying the file system again."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", "--invalidation-mode", "checked-hash", str(directory)],
                   check=False, capture_output=True, timeout=300)


def stage_dependencies(requirements: list[str], dest: Path) -> None:
    """Install the dependencies' wheels for the image's python (CPython 3.11 on x86-64
    Linux) into `dest` on the host, from the host's package index (pip's cache makes a repeat
    cheap): the containers on logquake's bridges have no route out, and a pip run inside the
    build would cost a vfs layer."""
    command = [sys.executable, "-m", "pip", "install", "-q", "--no-warn-script-location", "--no-compile", "--only-binary=:all:",
               "--target", str(dest), "--python-version", "3.11", "--implementation", "cp",
               "--platform", "manylinux2014_x86_64", "--platform", "manylinux_2_17_x86_64",
               "--platform", "manylinux_2_28_x86_64", *requirements]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        raise ImageError(f"pip install --target of {', '.join(requirements)} failed:\n{result.stderr.strip()[-2000:]}")
    shutil.rmtree(dest / "bin", ignore_errors=True)
    _compile(dest)


def stage_node(dest: Path) -> None:
    """The node packages' source at SOURCE_DIR, compiled (the image's python is 3.11 as the
    host's, so the bytecode is valid there), and the .pth line that puts it on the path."""
    source = dest / SOURCE_DIR.lstrip("/")
    for path in _source_files():
        target = source / path.relative_to(PROJECT_ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    _compile(source)
    site = dest / SITE_PACKAGES.lstrip("/")
    site.mkdir(parents=True, exist_ok=True)
    (site / "logquake-src.pth").write_text(SOURCE_DIR + "\n")


def _normalized(info: tarfile.TarInfo) -> tarfile.TarInfo:
    # The build cache keys a COPY layer by its files' content and metadata: fixed times and
    # owners make a re-staged, identical dependency set hit the cache.
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def _context_tar(recipe: str, layer: Path) -> io.BytesIO:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        text = recipe.encode()
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(text)
        tar.addfile(info, io.BytesIO(text))
        tar.add(layer, arcname="layer", filter=_normalized)
    buffer.seek(0)
    return buffer


def _build(client: Any, tag: str, recipe: str, layer: Path) -> None:
    output: list[str] = []
    try:
        for chunk in client.api.build(fileobj=_context_tar(recipe, layer), custom_context=True, tag=tag, rm=True,
                                      forcerm=True, decode=True, network_mode="none"):
            if "stream" in chunk:
                output.append(chunk["stream"])
            if "error" in chunk:
                raise ImageError(f"building {tag} failed: {chunk['error'].strip()}\n{''.join(output)[-2000:]}")
    except ImageError:
        raise
    except Exception as exc:
        raise ImageError(f"building {tag} failed: {exc}") from None
    if not _has_image(client, tag):
        raise ImageError(f"the build did not produce {tag}:\n{''.join(output)[-2000:]}")


def build_deps(client: Any, base: str, *, work_dir: Path) -> ImageInfo:
    """The base plus the broker's dependencies, once per set of pins."""
    tag = deps_tag(base)
    started = time.monotonic()
    if _has_image(client, tag):
        return ImageInfo(tag, False, time.monotonic() - started)
    requirements = pinned_requirements()
    _log(f"staging {', '.join(requirements)}; building {tag}")
    stage_dependencies(requirements, work_dir / "deps")
    _build(client, tag, copy_recipe(base, SITE_PACKAGES + "/", " ".join(requirements)), work_dir / "deps")
    return ImageInfo(tag, True, time.monotonic() - started)


def build_node(client: Any, deps: str, *, work_dir: Path, force: bool = False) -> ImageInfo:
    """The dependencies image plus this tree's node source, once per source hash."""
    tag = node_tag(deps)
    started = time.monotonic()
    if not force and _has_image(client, tag):
        return ImageInfo(tag, False, time.monotonic() - started)
    _log(f"staging the node source; building {tag}")
    stage_node(work_dir / "node")
    _build(client, tag, copy_recipe(deps, "/", "node source"), work_dir / "node")
    return ImageInfo(tag, True, time.monotonic() - started)


def remove_stale_node_images(client: Any, keep: str) -> list[str]:
    """Node images of other source hashes (no container may use them: logquake's containers
    are gone after every run)."""
    import docker.errors

    removed = []
    for image in client.images.list(name=NODE_REPOSITORY):
        tags = [t for t in image.tags if t != keep]
        if keep in image.tags or not tags:
            continue
        for tag in tags:
            try:
                client.images.remove(tag, noprune=False)
                removed.append(tag)
            except docker.errors.APIError:
                pass  # in use by a container of a run still going: left for a later build
    return removed


def ensure_image(client: Any = None, *, force: bool = False, log: Callable[[str], None] = _log) -> str:
    """The node image's tag, building what is missing. `client`: a docker.DockerClient
    (default: the daemon scripts/ensure-docker finds)."""
    if client is None:
        from cluster.docker_backend import docker_client

        client = docker_client()
    # One build at a time on this machine: parallel test workers and runs share the images.
    with open(LOCK_PATH, "a") as lock, tempfile.TemporaryDirectory(prefix="logquake-image-", dir="/var/tmp") as tmp:
        fcntl.flock(lock, fcntl.LOCK_EX)
        base = build_base(client, work_dir=Path(tmp))
        if base.built:
            log(f"built {base.tag} in {base.seconds:.1f} s")
        deps = build_deps(client, base.tag, work_dir=Path(tmp))
        if deps.built:
            log(f"built {deps.tag} in {deps.seconds:.1f} s")
        node = build_node(client, deps.tag, work_dir=Path(tmp), force=force)
    if node.built:
        log(f"built {node.tag} in {node.seconds:.1f} s")
        for tag in remove_stale_node_images(client, node.tag):
            log(f"removed the stale image {tag}")
    return node.tag


# -- CLI ------------------------------------------------------------------------------

def register(subparsers: Any) -> None:
    p = subparsers.add_parser("image", help="build the container image of the Docker back end (--backend docker)",
                              description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="image_command", required=True)
    build = sub.add_parser("build", help="build (or reuse, when the source is unchanged) the node image; prints its tag")
    build.add_argument("--force", action="store_true", help="rebuild the node image even if one with its hash exists (the base image is rebuilt once removed: docker rmi)")
    build.set_defaults(handler=handle_build)
    tag = sub.add_parser("tag", help="print the tag the current source tree's node image has (built or not)")
    tag.set_defaults(handler=handle_tag)


def handle_build(args: argparse.Namespace) -> int:
    from harness.cli import EXIT_HARNESS_ERROR
    from cluster.docker_backend import DockerUnavailable

    started = time.monotonic()
    try:
        tag = ensure_image(force=args.force)
    except (ImageError, DockerUnavailable) as exc:
        print(f"logquake image build: {exc}", file=sys.stderr)
        return EXIT_HARNESS_ERROR
    print(tag)
    _log(f"{tag} ready in {time.monotonic() - started:.1f} s")
    return 0


def handle_tag(args: argparse.Namespace) -> int:
    print(node_tag(deps_tag(base_tag())))
    return 0
