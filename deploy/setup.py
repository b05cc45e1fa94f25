"""Make this machine ready for `make run` or `make test`: `python3 -m deploy.setup run|test`.

Consumes the host: programs on PATH, the sandbox environment trees, the Docker CLI plugins;
installs what the target needs and is missing (`setup` lists it, in order). As root it
installs; as anyone else it prints one line with the exact command to run and exits 1. What
is there is skipped: a second call only looks, in well under a second. Stdlib only (it runs
with the system Python, before any venv exists). It does NOT create the venv or build
images: the Makefile does, with the venv's Python.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from sandbox import envbuild, envs, host

ROOT = Path(__file__).resolve().parent.parent
PLUGIN = ROOT / "deploy" / "docker-compose-v1-plugin"
SYSTEM_PLUGINS = Path("/usr/local/lib/docker/cli-plugins")
TEST_TOOLS = host.DOCKER + (host.HostTool("docker-compose", "docker-compose", "the compose stack"),)
"What `make test` needs beyond `make run`: a Docker engine and Debian's docker-compose."


def packages_needed(target: str, venv: Path, envs_dir: str = "") -> list[str]:
    """Debian packages `target` ('run' or 'test') needs and this host lacks."""
    tools = list(host.LOCAL)
    if envs.unbuilt(envs_dir):
        tools += host.BUILD
    if target == "test":
        tools += TEST_TOOLS
    packages = [t.package for t in host.missing(tools)]
    if not (venv / "bin" / "python").exists() and importlib.util.find_spec("ensurepip") is None:
        packages.append("python3-venv")  # Debian keeps `python3 -m venv` in its own package
    return packages


PLUGIN_DIRS = (Path.home() / ".docker" / "cli-plugins", SYSTEM_PLUGINS,
               Path("/usr/local/libexec/docker/cli-plugins"), Path("/usr/libexec/docker/cli-plugins"),
               Path("/usr/lib/docker/cli-plugins"))
"Where the Docker CLI looks for plugins."


def compose_plugin_works() -> bool:
    """True when `docker compose` has a plugin (Compose v2, or the hand-over installed
    before), or answers anyway."""
    if any((folder / "docker-compose").is_file() for folder in PLUGIN_DIRS):
        return True
    docker = host.which("docker")
    if docker is None:
        return False
    proc = subprocess.run([docker, "compose", "version"], capture_output=True, timeout=30)
    return proc.returncode == 0


def plugin_dir(root: bool) -> Path:
    """Where the compose plugin goes: the system folder as root, the user's otherwise."""
    return SYSTEM_PLUGINS if root else Path.home() / ".docker" / "cli-plugins"


def sudo_line(packages: list[str], trees: bool) -> str:
    """The one command a non-root user runs to do what this would do as root."""
    steps = []
    if packages:
        steps.append(f"sudo {host.apt_install(packages)}")
    if trees:
        steps.append("sudo python3 -m sandbox.envbuild")
    return " && ".join(steps)


def apt_install(packages: list[str]) -> None:
    """`apt-get update`, then install `packages` without questions."""
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(host.apt_install(packages).split() + ["-q"], check=True, env=env)


def install_plugin(root: bool) -> Path:
    """Copy the compose hand-over plugin into `plugin_dir(root)`; its path."""
    target = plugin_dir(root) / "docker-compose"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(PLUGIN, target)
    target.chmod(0o755)
    return target


def build_behind(envs_dir: str, names: list[str]) -> Path:
    """Start `python3 -m sandbox.envbuild` on the trees `names` and return once it builds
    (its lock held), not when it is done; its output goes to `build.log` in the trees folder,
    which this returns. `whet up` waits for it before it checks the trees."""
    log_path = envs.envs_dir(envs_dir) / "build.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    print(f"deploy.setup: building the environment trees {', '.join(names)} (debootstrap, "
          f"about 2 minutes once) while the rest installs; log {log_path}", flush=True)
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "sandbox.envbuild", *names,
                                 "--dir", envs_dir], cwd=ROOT, stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    while proc.poll() is None and not envbuild.builder_running(envs_dir):
        time.sleep(0.05)  # until it holds its lock, so a stack started next waits for it
    return log_path


def setup(target: str, venv: Path, envs_dir: str = "", *, root: bool | None = None,
          trees_behind: bool = False) -> int:
    """Install what `target` lacks; 0 when the machine is ready, 1 when a person must act. In order:

    - system packages with apt-get: for `run`, bubblewrap (the local sandbox), debootstrap while
      the trees are unbuilt, python3-venv while there is no venv and no ensurepip; for `test`,
      also docker.io, runc and docker-compose (the docker backend and the compose stack);
    - the sandbox environment trees (`sandbox.envbuild`: debootstrap, about 2 minutes once),
      or with `trees_behind` a builder of them left running (`build_behind`);
    - for `test`, the `docker compose` plugin that hands over to docker-compose 1.29
      (deploy/docker-compose-v1-plugin), where `docker compose` does not work yet."""
    root = os.geteuid() == 0 if root is None else root
    packages = packages_needed(target, venv, envs_dir)
    trees = envs.unbuilt(envs_dir)
    if (packages or trees) and not root:
        lacking = [f"{', '.join(packages)} (not installed)"] if packages else []
        lacking += [f"the sandbox trees {', '.join(s.key for s in trees)} (not built)"] if trees else []
        print(f"deploy.setup: `make {target}` needs {' and '.join(lacking)}, which takes root; "
              f"run: {sudo_line(packages, bool(trees))}", file=sys.stderr)
        return 1
    if packages:
        print(f"deploy.setup: installing {' '.join(packages)} (apt-get)", flush=True)
        apt_install(packages)
    if trees and trees_behind:
        build_behind(envs_dir, [spec.name for spec in trees])
    else:
        for spec in trees:
            print(f"deploy.setup: building the {spec.key} environment tree (debootstrap, "
                  "about 2 minutes once)", flush=True)
            envbuild.build(spec, envs_dir)
    if target == "test" and not compose_plugin_works():
        print(f"deploy.setup: `docker compose` hands over to docker-compose 1.29: "
              f"{install_plugin(root)}", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python3 -m deploy.setup run|test`: the exit status of `setup` (1 on a failed step)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target", choices=["run", "test"])
    parser.add_argument("--venv", default=".venv", help="the venv the Makefile makes")
    parser.add_argument("--envs-dir", default="", help="trees folder (default: WHET_ENVS_DIR "
                                                       "or /var/cache/whetstone/envs)")
    parser.add_argument("--trees-behind", action="store_true",
                        help="build the sandbox trees in a process left running (make run: "
                             "while the venv installs; whet up waits for it)")
    args = parser.parse_args(argv)
    try:
        return setup(args.target, Path(args.venv), args.envs_dir, trees_behind=args.trees_behind)
    except (subprocess.CalledProcessError, RuntimeError) as exc:
        print(f"deploy.setup: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
