"""Build the environment trees of `sandbox.envs` with debootstrap: `python -m sandbox.envbuild`.

Consumes the specs in `sandbox.envs` and the Debian mirror of the host's apt sources;
produces, per spec, `<envs dir>/<key>/rootfs` (the tree, with the spec's `prepare` commands
run in it, such as mypy's stub cache), `rootfs.tar` (for `docker import`)
and `manifest.json` (written last: package versions, so a build is frozen and auditable).

Idempotent: a spec whose manifest exists is skipped; a half-built tree is thrown away and
rebuilt; concurrent builders serialise on a lock file, and the command holds another for its
whole run, so a stack that starts meanwhile can wait for every tree (`wait_for_builder`).
Stdlib only, so CI can run it with the system Python before the virtual environment exists.
It does NOT import images into an engine: the docker backend does that from `rootfs.tar`
when the image is missing.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from sandbox.envs import SPECS, SUITE, EnvSpec, envs_dir, is_built, manifest, rootfs, tarball

DEFAULT_MIRROR = "http://deb.debian.org/debian"
BUILDING = ".building"
"The lock file `main` holds while it builds (one tree after another) in an envs folder."


def host_mirror() -> str:
    """The first Debian mirror named in the host's apt sources (deb822 or one-line)."""
    for path in sorted(Path("/etc/apt").glob("sources.list.d/*.sources")):
        for uri in re.findall(r"^URIs:\s*(\S+)", path.read_text(), re.M):
            if uri.rstrip("/").endswith("/debian"):
                return uri
    one_line = Path("/etc/apt/sources.list")
    if one_line.is_file():
        for match in re.finditer(r"^deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)", one_line.read_text(), re.M):
            if match[1].rstrip("/").endswith("/debian"):
                return match[1]
    return DEFAULT_MIRROR


def build(env: EnvSpec, root: str = "", mirror: str = "") -> Path:
    """Build `env` unless already built; return its manifest path."""
    base = envs_dir(root)
    base.mkdir(parents=True, exist_ok=True)
    with open(base / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if is_built(env, root):
            return manifest(env, root)
        work = base / f"{env.key}.partial"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        started = time.monotonic()
        _debootstrap(env, work / "rootfs", base / ".debs", mirror or host_mirror())
        _finish_tree(work / "rootfs")
        for command in env.prepare:
            subprocess.run(["chroot", str(work / "rootfs"), *command], check=True,
                           capture_output=True, env={"PATH": env.path, "HOME": "/root", "LANG": "C.UTF-8"})
        packages = _package_versions(work / "rootfs")
        subprocess.run(["tar", "-C", str(work / "rootfs"), "--numeric-owner", "-cf",
                        str(work / "rootfs.tar"), "."], check=True)
        final = base / env.key
        shutil.rmtree(final, ignore_errors=True)
        work.rename(final)
        doc = {"key": env.key, "name": env.name, "version": env.version, "suite": SUITE,
               "image": env.image, "packages": packages,
               "built_s": round(time.monotonic() - started, 1), "built_at": time.time()}
        manifest(env, root).write_text(json.dumps(doc, indent=1) + "\n")
        return manifest(env, root)


def _debootstrap(env: EnvSpec, target: Path, debs: Path, mirror: str) -> None:
    debs.mkdir(exist_ok=True)
    cmd = ["debootstrap", "--variant=minbase", f"--cache-dir={debs}",
           f"--include={','.join(env.packages)}", SUITE, str(target), mirror]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        log = target / "debootstrap" / "debootstrap.log"
        detail = log.read_text()[-2000:] if log.is_file() else proc.stderr[-2000:]
        raise RuntimeError(f"debootstrap of {env.key} failed:\n{detail}")


def _finish_tree(tree: Path) -> None:
    """Drop caches, and add the mount points every backend uses (/work, /.whet, /tmp)."""
    for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
        for item in (tree / junk).glob("*"):
            if item.is_file():
                item.unlink()
    for mount_point in ("work", ".whet", "tmp", "dev/shm"):
        (tree / mount_point).mkdir(parents=True, exist_ok=True)
    (tree / "tmp").chmod(0o1777)


def _package_versions(tree: Path) -> dict[str, str]:
    out = subprocess.run(["chroot", str(tree), "dpkg-query", "-W", "-f", "${Package} ${Version}\n"],
                         capture_output=True, text=True, check=True).stdout
    return dict(line.split(" ", 1) for line in out.splitlines() if line)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="specs to build (default: all)")
    parser.add_argument("--dir", default="", help="envs folder (default: WHET_ENVS_DIR or /var/cache/whetstone/envs)")
    parser.add_argument("--mirror", default="", help="Debian mirror (default: the host's)")
    args = parser.parse_args(argv)
    base = envs_dir(args.dir)
    base.mkdir(parents=True, exist_ok=True)
    with open(base / BUILDING, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        for name in args.names or sorted(SPECS):
            env = SPECS[name]
            try:
                path = build(env, args.dir, args.mirror)
            except (OSError, RuntimeError, subprocess.CalledProcessError) as exc:
                # Said while the lock is held: whoever waits on it reads the whole reason.
                print(f"sandbox.envbuild: building the tree {env.key} failed: {_reason(exc)}",
                      file=sys.stderr, flush=True)
                return 1
            print(f"env {env.key}: {rootfs(env, args.dir)} "
                  f"({tarball(env, args.dir).stat().st_size >> 20} MiB tar); {path}", flush=True)
    return 0


def _reason(exc: BaseException) -> str:
    if isinstance(exc, FileNotFoundError) and exc.filename:
        return (f"`{exc.filename}` is not installed or not on PATH; "
                f"install it (apt-get install {exc.filename}) and run this again")
    if isinstance(exc, subprocess.CalledProcessError):
        tail = (exc.stderr or b"")[-2000:]
        tail = tail.decode(errors="replace") if isinstance(tail, bytes) else tail
        return f"`{' '.join(map(str, exc.cmd))}` exited {exc.returncode}: {tail}"
    return str(exc)


def builder_running(root: str = "") -> bool:
    """True while a `python -m sandbox.envbuild` builds trees in the envs folder `root`."""
    return _wait_on_builder(root, block=False)


def wait_for_builder(root: str = "") -> bool:
    """Block until no `python -m sandbox.envbuild` builds in the envs folder `root` (make run
    starts one behind the venv's install); True if one was building."""
    return _wait_on_builder(root, block=True)


def _wait_on_builder(root: str, block: bool) -> bool:
    try:
        held = open(envs_dir(root) / BUILDING)
    except OSError:  # never built here, or unreadable: no builder to wait for
        return False
    with held:
        try:
            fcntl.flock(held, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return False
        except BlockingIOError:
            if block:
                fcntl.flock(held, fcntl.LOCK_SH)
            return True


if __name__ == "__main__":
    sys.exit(main())
