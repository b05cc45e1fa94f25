"""The policy side of whetstone: models, sampling engines, weight versions, the RL objective.

Modules that import torch do so at the top and are only imported by the generator and the
learner; `policy.config` imports none of it, so the slim image can load a full config.
"""
