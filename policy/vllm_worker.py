"""Mixed into each vLLM GPU worker (`worker_extension_cls`): load weights from a file.

Consumes the path of a safetensors file written by `policy.vllm_engine`; loads it onto the
worker's device and hands the tensors to the model's own `load_weights`, which knows the
model's fused layouts and its tied embeddings. Imports vLLM nothing at module level.
"""

from __future__ import annotations


class WeightLoader:
    """A vLLM worker extension that installs weights from a safetensors file in place."""

    def whet_load_weights(self, path: str) -> int:
        """Install the weights in `path` in place; returns how many tensors were read."""
        from safetensors.torch import load_file

        state = load_file(path, device=str(self.device))  # type: ignore[attr-defined]
        self.model_runner.model.load_weights(weights=state.items())  # type: ignore[attr-defined]
        return len(state)
