"""A learner rank other than 0, as rank 0's child (`[learner] ranks = "children"`):
`python -m policy.rank_main --config F --checkpoint-dir D`.

Consumes the trainer's config (`policy.config.TrainerConfig` as JSON, written by rank 0)
and operations broadcast by rank 0 (`policy.ranks`); runs each on its own `Trainer`
until 'stop'. RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT come from the
environment. It dies with its parent (PR_SET_PDEATHSIG). It talks to no bus.
"""

from __future__ import annotations

import argparse
import ctypes
import signal
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="policy.rank_main")
    parser.add_argument("--config", required=True)
    parser.add_argument("--checkpoint-dir", required=True)
    args = parser.parse_args(argv)
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)
    except OSError:
        pass
    import msgspec

    from policy.config import TrainerConfig
    from policy.ranks import follow
    from policy.trainer import Trainer

    config = msgspec.json.decode(Path(args.config).read_bytes(), type=TrainerConfig)
    follow(Trainer(config, Path(args.checkpoint_dir)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
