"""Demonstrations for the warm start (`[warmstart]`): solved training tasks as `Demo`s.

`make` chooses the gated training tasks and makes their demonstrations, `answers` those of
single-turn tasks (the reference as an answer), `episodes` those of tool tasks (a scripted
agent's judged episodes), `records` the JSON-lines file. `whet demos` is the command.
"""

from envs.demos.make import DomainTally, Made, in_use, make_demos
from bus.demos_file import read_demos, write_demos

__all__ = ["DomainTally", "Made", "in_use", "make_demos", "read_demos", "write_demos"]
