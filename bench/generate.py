"""Generate realistic capture bundles for benchmarks and smoke tests.

``generate(out_dir, n, seed=0)`` writes ``n`` bundles laid out like the
producer's ``.pull-captures/`` tree (``<out>/<sanitized-slug>/<utc_ts>/``,
plus ``.last``), each file serialized the way the producer does
(``json.dumps(indent=2, sort_keys=True, ensure_ascii=False) + "\\n"``).

Every schema-1 manifest carries the 20 keys of CONTRACTS §1.8.1 and a correct
``submission_fingerprint``; gate-only bundles follow §1.10. Boot failures
carry a vLLM-style container log tail (2-20 KB of INFO/WARNING start-up lines
with ``docker compose logs`` prefixes, the error and its traceback near the
end) and the ``actual`` numbers the producer would parse out of it (§1.6).

The mix covers every failure class: CUDA OOM, KV cache too large, quant
config errors, unsupported architectures, import/attribute drift, "no kernel
image", FlashAttention-3 / fp8 capability errors, cold starts, served-name
404s, the streaming-dead #145 shape, gate-only aborts, success anchors and
unknown errors. The first bundles follow a fixed schedule (``HEAD``) so that
even a dozen bundles span all six classes; later ones are drawn by weight.

Deterministic: bundle ``i`` depends only on ``(seed, i)``, so a corpus of 12
is the prefix of a corpus of 2,000.

    python bench/generate.py OUT N [--seed S] [--jobs J]
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import random
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from loop_core.keys import submission_fingerprint

__all__ = ["HEAD", "KIND_WEIGHTS", "generate", "plan", "sanitize_slug"]

# --------------------------------------------------------------------------- catalog


@dataclass(frozen=True)
class Model:
    slug: str
    arch: str
    quant_label: str | None  # manifest quant_label, case as the deriver emits it
    method: str | None  # vLLM --quantization
    params_b: float  # billions of parameters
    caps: tuple[str, ...] = ()  # optional capabilities the config declares


MODELS: tuple[Model, ...] = (
    Model("Qwen/Qwen2.5-7B-Instruct", "Qwen2ForCausalLM", "bfloat16", None, 7.6,
          ("tool-call", "structured-output")),
    Model("Qwen/Qwen2.5-14B-Instruct-AWQ", "Qwen2ForCausalLM", "AWQ", "awq", 14.8, ("tool-call",)),
    Model("Qwen/Qwen2.5-32B-Instruct-AWQ", "Qwen2ForCausalLM", "AWQ", "awq", 32.8,
          ("tool-call", "structured-output")),
    Model("Qwen/Qwen2.5-Coder-32B-Instruct-GPTQ-Int4", "Qwen2ForCausalLM", "GPTQ", "gptq", 32.8,
          ()),
    Model("Qwen/Qwen2.5-VL-7B-Instruct", "Qwen2_5_VLForConditionalGeneration", "bfloat16", None,
          8.3, ("vision",)),
    Model("Qwen/Qwen3-8B", "Qwen3ForCausalLM", "bfloat16", None, 8.2,
          ("tool-call", "reasoning-streaming")),
    Model("Qwen/Qwen3-14B-AWQ", "Qwen3ForCausalLM", "AWQ", "awq", 14.8,
          ("tool-call", "reasoning-streaming")),
    Model("Qwen/Qwen3-30B-A3B", "Qwen3MoeForCausalLM", "bfloat16", None, 30.5,
          ("tool-call", "reasoning-streaming")),
    Model("Qwen/Qwen3-32B-FP8", "Qwen3ForCausalLM", "fp8", "fp8", 32.8, ("reasoning-streaming",)),
    Model("meta-llama/Llama-3.1-8B-Instruct", "LlamaForCausalLM", "bfloat16", None, 8.0,
          ("tool-call", "long-context")),
    Model("hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4", "LlamaForCausalLM", "AWQ", "awq",
          70.6, ("tool-call",)),
    Model("neuralmagic/Meta-Llama-3.1-8B-Instruct-FP8", "LlamaForCausalLM", "fp8", "fp8", 8.0, ()),
    Model("TheBloke/Llama-2-13B-chat-GPTQ", "LlamaForCausalLM", "GPTQ", "gptq", 13.0, ()),
    Model("google/gemma-2-9b-it", "Gemma2ForCausalLM", "bfloat16", None, 9.2, ()),
    Model("google/gemma-3-27b-it", "Gemma3ForConditionalGeneration", "bfloat16", None, 27.4,
          ("vision",)),
    Model("mistralai/Mistral-7B-Instruct-v0.3", "MistralForCausalLM", "bfloat16", None, 7.2,
          ("tool-call",)),
    Model("mistralai/Mistral-Small-3.1-24B-Instruct-2503", "Mistral3ForConditionalGeneration",
          "bfloat16", None, 24.0, ("vision", "tool-call")),
    Model("casperhansen/mixtral-instruct-awq", "MixtralForCausalLM", "AWQ", "awq", 46.7, ()),
    Model("deepseek-ai/DeepSeek-R1-Distill-Qwen-14B", "Qwen2ForCausalLM", "bfloat16", None, 14.8,
          ("reasoning-streaming",)),
    Model("microsoft/Phi-4-mini-instruct", "Phi3ForCausalLM", "bfloat16", None, 3.8,
          ("tool-call",)),
    Model("ibm-granite/granite-3.3-8b-instruct", "GraniteForCausalLM", "bfloat16", None, 8.2,
          ("tool-call", "structured-output")),
    Model("THUDM/GLM-4-9B-0414", "Glm4ForCausalLM", "BF16", None, 9.4, ()),
)

# Architectures an engine image may not know yet (arch-unsupported scenario).
NEW_ARCH_MODELS: tuple[Model, ...] = (
    Model("Qwen/Qwen3-Next-80B-A3B-Instruct-AWQ", "Qwen3NextForCausalLM", "AWQ", "awq", 80.0),
    Model("LGAI-EXAONE/EXAONE-4.0-32B", "Exaone4ForCausalLM", "bfloat16", None, 32.0),
    Model("tencent/Hunyuan-7B-Instruct", "HunYuanDenseV1ForCausalLM", "bfloat16", None, 7.5),
    Model("moonshotai/Kimi-VL-A3B-Instruct", "KimiVLForConditionalGeneration", "bfloat16", None,
          16.4),
    Model("acme/Exotic-9B", "ExoticForCausalLM", "BF16", None, 9.0),
    Model("Org/My Model__v2!!", "MyModelForCausalLM", None, None, 2.0),
)

# (name, VRAM MiB, compute capability, weight)
GPUS: tuple[tuple[str, int, float, int], ...] = (
    ("NVIDIA GeForce RTX 3090", 24576, 8.6, 40),
    ("NVIDIA GeForce RTX 3090 Ti", 24564, 8.6, 8),
    ("NVIDIA GeForce RTX 4090", 24564, 8.9, 18),
    ("NVIDIA RTX A6000", 49140, 8.6, 8),
    ("NVIDIA L40S", 46068, 8.9, 5),
    ("NVIDIA A100-SXM4-80GB", 81920, 8.0, 8),
    ("NVIDIA H100 80GB HBM3", 81559, 9.0, 5),
    ("NVIDIA GeForce RTX 5090", 32607, 12.0, 3),
    ("Tesla P40", 24576, 6.1, 2),
)

# (engine_pin, vLLM version, log style); "v1" logs carry (APIServer pid=..) prefixes.
ENGINES: tuple[tuple[str, str, str], ...] = (
    ("vllm/vllm-openai:v0.8.5", "0.8.5", "plain"),
    ("vllm/vllm-openai:v0.9.2", "0.9.2", "plain"),
    ("vllm/vllm-openai:v0.10.1.1", "0.10.1.1", "v1"),
    ("vllm/vllm-openai:v0.11.0", "0.11.0", "v1"),
    ("vllm/vllm-openai:nightly-bf610c2f", "0.11.1.dev212+gbf610c2f", "v1"),
    ("club3090/vllm-genesis:2026-05-01", "0.10.2+genesis.3", "v1"),
)

PROFILES = ("vllm/minimal", "vllm/default", "vllm/dual", "vllm/long-context", "vllm/tp2-nvlink")
CONFIDENCES = ("exact", "estimated-lower-bound", "derived", "not-generic-dense-eligible")
CAPABILITIES = ("long-context", "plain-chat", "reasoning-streaming", "streaming",
                "structured-output", "tool-call", "vision")
FLOOR_CAPS = ("plain-chat", "streaming")
BOOT_FAILURE = "server did not become ready before timeout"
PY = "/usr/local/lib/python3.12/dist-packages"
BASE_TIME = datetime(2026, 5, 1, 6, 0, 0, tzinfo=timezone.utc)

# The first bundles, in order: a dozen already covers all six classes under
# the reference pack (tests/test_bench.py relies on it).
HEAD: tuple[tuple[str, dict[str, Any]], ...] = (
    ("oom-torch", {}),
    ("streaming-dead", {}),
    ("import-error", {"aligned_restart": True, "variant": 0}),
    ("gate", {"token": "engine-support-unknown/no-arch-row"}),
    ("cold-start", {}),
    ("success", {}),
    ("quant-config", {}),
    ("no-kernel-image", {}),
    ("unknown-error", {}),
    ("oom-kv-cache", {}),
    ("served-404", {}),
    ("gate", {"token": "disk-short"}),
    ("arch-unsupported", {}),
    ("fa3-hopper", {}),
    ("success", {"all_caps": True}),
    ("no-log", {}),
)

# Share of each scenario after HEAD, in percent.
KIND_WEIGHTS: dict[str, int] = {
    "success": 14,
    "oom-torch": 12,
    "oom-kv-cache": 9,
    "quant-config": 8,
    "arch-unsupported": 5,
    "import-error": 7,
    "no-kernel-image": 4,
    "fa3-hopper": 4,
    "cold-start": 5,
    "served-404": 3,
    "streaming-dead": 2,
    "gate": 14,
    "unknown-error": 11,
    "no-log": 2,
}

GATE_TOKENS: tuple[tuple[str, int], ...] = (
    ("disk-short", 25),
    ("engine-support-unknown/no-arch-row", 18),
    ("engine-support-unknown/runtime-incompatible", 7),
    ("hard-block", 12),
    ("no-fit-model", 8),
    ("hardware-sm-undetermined", 5),
    ("repo-not-found", 7),
    ("gated-no-token", 7),
    ("needs-trust-remote-code-ack", 5),
    ("unsupported-format", 3),
    ("ambiguous-weight-set", 2),
    ("quant-dtype-unknown", 2),
    ("confirm-needs-3.2", 2),
)
DERIVER_TOKENS = frozenset({"repo-not-found", "gated-no-token", "unsupported-format",
                            "ambiguous-weight-set", "quant-dtype-unknown"})

SUPPORTED_ARCHS = (
    "AquilaModel", "AquilaForCausalLM", "ArceeForCausalLM", "ArcticForCausalLM",
    "MiniMaxForCausalLM",
    "MiniMaxText01ForCausalLM", "MiniMaxM1ForCausalLM", "BaiChuanForCausalLM",
    "BaichuanForCausalLM",
    "BailingMoeForCausalLM", "BambaForCausalLM", "BloomForCausalLM", "ChatGLMModel",
    "ChatGLMForConditionalGeneration", "CohereForCausalLM", "Cohere2ForCausalLM", "DbrxForCausalLM",
    "DeciLMForCausalLM", "DeepseekForCausalLM", "DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM",
    "Dots1ForCausalLM", "Ernie4_5ForCausalLM", "Ernie4_5_MoeForCausalLM", "ExaoneForCausalLM",
    "FalconForCausalLM", "Fairseq2LlamaForCausalLM", "GemmaForCausalLM", "Gemma2ForCausalLM",
    "Gemma3ForCausalLM", "Gemma3nForConditionalGeneration", "GlmForCausalLM", "Glm4ForCausalLM",
    "Glm4MoeForCausalLM", "GPT2LMHeadModel", "GPTBigCodeForCausalLM", "GPTJForCausalLM",
    "GPTNeoXForCausalLM", "GraniteForCausalLM", "GraniteMoeForCausalLM",
    "GraniteMoeHybridForCausalLM",
    "GraniteMoeSharedForCausalLM", "GritLM", "Grok1ModelForCausalLM", "HunYuanMoEV1ForCausalLM",
    "InternLMForCausalLM", "InternLM2ForCausalLM", "InternLM2VEForCausalLM", "InternLM3ForCausalLM",
    "JAISLMHeadModel", "JambaForCausalLM", "LlamaForCausalLM", "LLaMAForCausalLM",
    "MambaForCausalLM",
    "FalconMambaForCausalLM", "Mamba2ForCausalLM", "MiniCPMForCausalLM", "MiniCPM3ForCausalLM",
    "MistralForCausalLM", "MixtralForCausalLM", "QuantMixtralForCausalLM", "MptForCausalLM",
    "MPTForCausalLM", "MiMoForCausalLM", "NemotronForCausalLM", "NemotronHForCausalLM",
    "OlmoForCausalLM",
    "Olmo2ForCausalLM", "OlmoeForCausalLM", "OPTForCausalLM", "OrionForCausalLM",
    "PersimmonForCausalLM",
    "PhiForCausalLM", "Phi3ForCausalLM", "Phi3SmallForCausalLM", "PhiMoEForCausalLM",
    "Plamo2ForCausalLM", "QWenLMHeadModel", "Qwen2ForCausalLM", "Qwen2MoeForCausalLM",
    "Qwen3ForCausalLM", "Qwen3MoeForCausalLM", "RWForCausalLM", "StableLMEpochForCausalLM",
    "StableLmForCausalLM", "Starcoder2ForCausalLM", "SolarForCausalLM", "TeleChat2ForCausalLM",
    "TeleFLMForCausalLM", "XverseForCausalLM", "Zamba2ForCausalLM", "BertModel", "Gemma2Model",
    "GPT2ForSequenceClassification", "GteModel", "GteNewModel", "InternLM2ForRewardModel",
    "JambaForSequenceClassification", "LlamaModel", "MistralModel", "ModernBertModel",
    "NomicBertModel",
    "Qwen2Model", "Qwen2ForRewardModel", "Qwen2ForProcessRewardModel", "RobertaForMaskedLM",
    "RobertaModel", "XLMRobertaModel", "LlavaNextForConditionalGeneration", "Phi3VForCausalLM",
    "Qwen2VLForConditionalGeneration", "PrithviGeoSpatialMAE", "AriaForConditionalGeneration",
    "AyaVisionForConditionalGeneration", "Blip2ForConditionalGeneration",
    "ChameleonForConditionalGeneration", "DeepseekVLV2ForCausalLM", "FuyuForCausalLM",
    "Gemma3ForConditionalGeneration", "GLM4VForCausalLM", "Glm4vForConditionalGeneration",
    "GraniteSpeechForConditionalGeneration", "H2OVLChatModel", "InternVLChatModel",
    "Idefics3ForConditionalGeneration", "SmolVLMForConditionalGeneration",
    "KeyeForConditionalGeneration", "LlavaForConditionalGeneration",
    "LlavaNextVideoForConditionalGeneration", "LlavaOnevisionForConditionalGeneration",
    "MantisForConditionalGeneration", "MiniMaxVL01ForConditionalGeneration", "MiniCPMO", "MiniCPMV",
    "Mistral3ForConditionalGeneration", "MolmoForCausalLM", "NVLM_D", "Ovis",
    "PaliGemmaForConditionalGeneration", "PixtralForConditionalGeneration",
    "Qwen2_5_VLForConditionalGeneration", "Qwen2AudioForConditionalGeneration",
    "Qwen2_5OmniModel", "Qwen2_5OmniForConditionalGeneration", "UltravoxModel",
    "Phi4MMForCausalLM", "Florence2ForConditionalGeneration", "MllamaForConditionalGeneration",
    "Llama4ForConditionalGeneration", "SkyworkR1VChatModel", "WhisperForConditionalGeneration",
    "MiMoMTPModel", "EAGLEModel", "EagleLlamaForCausalLM", "EagleLlama4ForCausalLM",
    "EagleMiniCPMForCausalLM", "Eagle3LlamaForCausalLM", "DeepSeekMTPModel", "MedusaModel",
    "MLPSpeculatorPreTrainedModel", "SmolLM3ForCausalLM", "Emu3ForConditionalGeneration",
    "TransformersForCausalLM",
)


# --------------------------------------------------------------------------- helpers


def sanitize_slug(slug: str) -> str:
    """CONTRACTS §1.1: the producer's directory name for an HF slug."""
    s = re.sub(r"[^a-z0-9._-]+", "-", slug.strip().lower())
    s = re.sub(r"-{2,}", "-", s).strip("-._")
    return s or "model"


def _weighted(rng: random.Random, pairs: Any) -> Any:
    items = list(pairs)
    total = sum(w for _, w in items)
    r = rng.random() * total
    for item, w in items:
        r -= w
        if r < 0:
            return item
    return items[-1][0]


def _hex(rng: random.Random, n: int) -> str:
    return f"{rng.getrandbits(4 * n):0{n}x}"


def _uuid(rng: random.Random) -> str:
    return f"{_hex(rng, 8)}-{_hex(rng, 4)}-{_hex(rng, 4)}-{_hex(rng, 4)}-{_hex(rng, 12)}"


_COMMITS = tuple(f"{random.Random(f'commit{i}').getrandbits(160):040x}" for i in range(9))
_KV_VERSIONS = ("kvcalc-v0.8.0", "kvcalc-v0.8.0+6cbba58fa8c0", "kvcalc-v0.8.0+1a2b3c4d5e6f",
                "kvcalc-v0.8.0+90d3e1c77b21")

# Producer parse of pt3.actual (CONTRACTS §1.6), ported so the numbers agree with the log.
_NUM = r"([0-9]+(?:\.[0-9]+)?)"
_UNIT = r"(B|KiB|KB|MiB|MB|GiB|GB)"
_FACTOR = {"b": 1 / 1048576, "kib": 1 / 1024, "kb": 1 / 1024, "mib": 1, "mb": 1, "gib": 1024,
           "gb": 1024}
_ALLOC = re.compile(rf"tried to allocate\s+{_NUM}\s*{_UNIT}", re.I)
_KV_NEEDED = re.compile(rf"{_NUM}\s*{_UNIT}\s+kv cache is needed", re.I)
_PEAK_PHRASES = ("gpu_worker", "gpu worker", "gpuworker", "peak memory", "memory peak",
                 "maximum memory", "peak gpu memory", "max memory")
_PEAK = re.compile(f"(?:{'|'.join(_PEAK_PHRASES)})" + rf"[^\d\n]*?{_NUM}\s*(MiB|MB|GiB|GB)", re.I)
_WORKER_KV = re.compile(rf"gpu_worker[^\n]*?available kv cache memory[:\s]+{_NUM}\s*{_UNIT}", re.I)
_KV_AVAIL = re.compile(rf"available kv cache memory\s*\(\s*{_NUM}\s*{_UNIT}\s*\)", re.I)


def _mib(m: re.Match[str] | None) -> int | None:
    return None if m is None else round(float(m.group(1)) * _FACTOR[m.group(2).lower()])


def parse_actual(excerpt: str | None) -> dict[str, int | None]:
    """The producer's ``actual`` block for a boot log excerpt (§1.6)."""
    if not excerpt:
        return {"attempted_alloc_mib": None, "gpu_worker_reported_mib": None}
    low = excerpt.lower()  # cheap substring checks spare most regex scans
    attempted = None
    if "tried to allocate" in low:
        attempted = _mib(_ALLOC.search(excerpt))
    if attempted is None and "kv cache is needed" in low:
        attempted = _mib(_KV_NEEDED.search(excerpt))
    worker = None
    if any(p in low for p in _PEAK_PHRASES):
        worker = _mib(_PEAK.search(excerpt))
    if worker is None and "available kv cache memory" in low:
        worker = _mib(_WORKER_KV.search(excerpt)) if "gpu_worker" in low else None
        if worker is None:
            worker = _mib(_KV_AVAIL.search(excerpt))
    return {"attempted_alloc_mib": attempted, "gpu_worker_reported_mib": worker}


_BYTES_PER_PARAM = {"awq": 0.56, "gptq": 0.56, "fp8": 1.02}


def _weights_gib(model: Model) -> float:
    return model.params_b * _BYTES_PER_PARAM.get(model.method or "", 2.0)


def _dump(doc: Any) -> str:
    return json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


# --------------------------------------------------------------------------- environment


@dataclass
class Env:
    """Everything one capture shares: model, engine, GPUs, timing."""

    rng: random.Random
    model: Model
    pin: str
    version: str
    style: str
    gpus: list[tuple[str, int, float]]
    ctx: int
    kv_format: str
    commit: str
    kv_calc: str
    utc: datetime
    profile: str
    service: str = "vllm-1"
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def tp(self) -> int:
        return len(self.gpus)

    @property
    def sm(self) -> float:
        return min(g[2] for g in self.gpus)

    @property
    def gpu_name(self) -> str:
        return self.gpus[0][0]

    @property
    def vram_gib(self) -> float:
        return min(g[1] for g in self.gpus) / 1024 - 0.44

    @property
    def topology_class(self) -> str:
        return f"{self.tp}x{min(g[1] for g in self.gpus)}MiB"

    @property
    def topology_summary(self) -> str:
        pairs = sorted((g[0], g[1]) for g in self.gpus)
        return "[" + ", ".join(f"({n}, {v})" for n, v in pairs) + "]"


def _env(rng: random.Random, utc: datetime, *, models: tuple[Model, ...] = MODELS,
         gpu_filter: Callable[[tuple[str, int, float, int]], bool] | None = None,
         engine_filter: Callable[[tuple[str, str, str]], bool] | None = None) -> Env:
    model = rng.choice(models)
    gpu_pool = [g for g in GPUS if gpu_filter is None or gpu_filter(g)] or list(GPUS)
    name, vram, sm, _w = _weighted(rng, ((g, g[3]) for g in gpu_pool))
    weights_gib = _weights_gib(model)
    tp = 1
    while tp < 4 and weights_gib / tp > vram / 1024 * 0.8:
        tp *= 2
    if tp == 1 and rng.random() < 0.2:
        tp = 2
    gpus = [(name, vram, sm)] * tp
    if tp == 2 and name == "NVIDIA GeForce RTX 3090" and rng.random() < 0.15:
        gpus = [("NVIDIA GeForce RTX 3090", 24576, 8.6), ("NVIDIA GeForce RTX 3090 Ti", 24564, 8.6)]
    engines = [e for e in ENGINES if engine_filter is None or engine_filter(e)] or list(ENGINES)
    pin, version, style = rng.choice(engines)
    return Env(
        rng=rng, model=model, pin=pin, version=version, style=style, gpus=gpus,
        ctx=rng.choice((8192, 16384, 32768, 32768, 65536, 131072)),
        kv_format=rng.choice(("fp8_e5m2", "fp8", "bf16", "fp16", "auto")),
        commit=rng.choice(_COMMITS), kv_calc=rng.choice(_KV_VERSIONS), utc=utc,
        profile="vllm/dual" if tp > 1 else rng.choice(PROFILES),
        service=rng.choice(("vllm-1", "vllm-1", "vllm-1", "vllm-server-1")),
    )


def _breakdown(env: Env) -> dict[str, float] | None:
    """The real [B] breakdown shape (CONTRACTS §1.4), or None on older producers."""
    rng = env.rng
    if rng.random() < 0.4:
        return None
    weights = _weights_gib(env.model) / env.tp
    kv_req = round(rng.uniform(2.0, 16.0), 4)
    kv_act = round(kv_req * rng.uniform(0.7, 1.0), 4)
    parts = {
        "weights": round(weights, 4), "kv_pool_requested": kv_req, "kv_pool_actual": kv_act,
        "kv_pool_sliding_fixed": 0.0, "activation": round(rng.uniform(0.6, 2.4), 4),
        "cudagraph_overhead": round(rng.uniform(0.2, 0.9), 4), "drafter": 0.0,
    }
    parts["total"] = round(sum(v for k, v in parts.items() if k != "kv_pool_requested"), 4)
    return parts


# --------------------------------------------------------------------------- logs


API, ENGINE = "APIServer pid=1", "EngineCore_0 pid={pid}"


class Log:
    """Lines of one container log, as ``docker compose logs --no-color`` shows them."""

    def __init__(self, env: Env, start: datetime) -> None:
        self.env = env
        self.rng = env.rng
        self.t = start
        self.lines: list[str] = []
        self.head = f"{env.service}  | "
        self.engine = ENGINE.format(pid=self.rng.randrange(60, 400))
        self.worker_pids = [self.rng.randrange(200, 900) for _ in range(env.tp)]
        self.mark: int | None = None  # index of the first line of the error, once there is one

    def begin_error(self) -> None:
        if self.mark is None:
            self.mark = len(self.lines)

    def error_chars(self, context: int = 4) -> int:
        """Characters from a few lines before the error to the end (0 without an error)."""
        if self.mark is None:
            return 0
        return sum(len(line) + 1 for line in self.lines[max(0, self.mark - context):])

    def who(self, proc: str | None) -> str:
        return f"({proc}) " if proc and self.env.style == "v1" else ""

    def emit(self, proc: str | None, level: str, src: str, msg: str, dt: float = 0.3) -> None:
        self.t += timedelta(seconds=self.rng.uniform(0, dt))
        self.lines.append(f"{self.head}{self.who(proc)}{level} {self.t:%m-%d %H:%M:%S} [{src}] "
                          f"{msg}")

    def raw(self, proc: str | None, text: str) -> None:
        self.lines.append(f"{self.head}{self.who(proc)}{text}")

    def workers(self) -> list[str]:
        if self.env.tp == 1:
            return [self.engine]
        return [f"VllmWorker TP{r} pid={p}" for r, p in enumerate(self.worker_pids)]

    def text(self) -> str:
        return "\n".join(self.lines)


def _args_repr(env: Env) -> str:
    m = env.model
    args: dict[str, Any] = {"model_tag": m.slug, "host": "0.0.0.0", "model": m.slug,
                            "served_model_name": [m.slug.split("/")[-1].lower()],
                            "max_model_len": env.ctx, "gpu_memory_utilization": 0.92}
    if env.tp > 1:
        args["tensor_parallel_size"] = env.tp
    if m.method:
        args["quantization"] = m.method
    if env.kv_format.startswith("fp8"):
        args["kv_cache_dtype"] = env.kv_format
    args["enable_prefix_caching"] = True
    args["max_num_seqs"] = env.rng.choice((8, 16, 32, 64))
    return repr(args)


_COMPILATION_CONFIG = json.dumps({
    "level": 3, "debug_dump_path": "", "cache_dir": "", "backend": "", "custom_ops": [],
    "splitting_ops": ["vllm.unified_attention", "vllm.unified_attention_with_output",
                      "vllm.mamba_mixer2"],
    "use_inductor": True, "compile_sizes": [],
    "inductor_compile_config": {"enable_auto_functionalized_v2": False}, "inductor_passes": {},
    "use_cudagraph": True, "cudagraph_num_of_warmups": 1,
    "cudagraph_capture_sizes": [*range(512, 0, -8), 4, 2, 1], "cudagraph_copy_inputs": False,
    "full_cuda_graph": False, "max_capture_size": 512, "local_cache_dir": None,
}, separators=(",", ":"))


def _config_repr(env: Env) -> str:
    """The engine's one-line config dump (about 2 KB, as in real logs)."""
    m = env.model
    q = {"awq": "awq_marlin", "gptq": "gptq_marlin", "fp8": "fp8"}.get(m.method or "", "None")
    dtype = "torch.float16" if m.method in ("awq", "gptq") else "torch.bfloat16"
    served = m.slug.split("/")[-1].lower()
    return (
        f"model='{m.slug}', speculative_config=None, tokenizer='{m.slug}', "
        "skip_tokenizer_init=False, tokenizer_mode=auto, revision=None, tokenizer_revision=None, "
        f"trust_remote_code=False, dtype={dtype}, max_seq_len={env.ctx}, download_dir=None, "
        f"load_format=auto, tensor_parallel_size={env.tp}, pipeline_parallel_size=1, "
        f"data_parallel_size=1, disable_custom_all_reduce=False, quantization={q}, "
        f"enforce_eager=False, kv_cache_dtype={env.kv_format}, device_config=cuda, "
        "decoding_config=DecodingConfig(backend='auto', disable_fallback=False, "
        "disable_any_whitespace=False, disable_additional_properties=False, "
        "reasoning_backend=''), "
        "observability_config=ObservabilityConfig(show_hidden_metrics_for_version=None, "
        "otlp_traces_endpoint=None, collect_detailed_traces=None), seed=0, "
        f"served_model_name={served}, enable_prefix_caching=True, chunked_prefill_enabled=True, "
        f"use_async_output_proc=True, pooler_config=None, compilation_config={_COMPILATION_CONFIG}"
    )


ROUTES = (("/openapi.json", "HEAD, GET"), ("/docs", "HEAD, GET"), ("/health", "GET"),
          ("/load", "GET"), ("/ping", "POST"), ("/tokenize", "POST"), ("/detokenize", "POST"),
          ("/v1/models", "GET"), ("/version", "GET"), ("/v1/responses", "POST"),
          ("/v1/chat/completions", "POST"), ("/v1/completions", "POST"),
          ("/v1/embeddings", "POST"), ("/pooling", "POST"), ("/classify", "POST"),
          ("/score", "POST"), ("/v1/score", "POST"), ("/rerank", "POST"), ("/metrics", "GET"))
PHASES = ("import", "args", "config", "dist", "load", "compile", "profile", "graphs", "ready")


def _startup(log: Log, until: str, *, partial: float = 0.0) -> None:
    """Emit the normal start-up lines of every phase before ``until``.

    With ``partial`` > 0 the phase ``until`` itself is emitted that far
    (used for cold starts that were still loading when the timeout hit).
    """
    env, rng = log.env, log.rng
    m = env.model
    stop = PHASES.index(until)
    for idx, phase in enumerate(PHASES):
        if idx > stop or (idx == stop and partial <= 0):
            break
        frac = partial if idx == stop else 1.0
        if phase == "import":
            log.emit(None, "INFO", "__init__.py:244", "Automatically detected platform cuda.")
        elif phase == "args":
            log.emit(API, "INFO", "api_server.py:1805", f"vLLM API server version {env.version}",
                     2.5)
            log.emit(API, "INFO", "utils.py:326", f"non-default args: {_args_repr(env)}")
            if rng.random() < 0.3:
                log.emit(API, "WARNING", "__init__.py:2899",
                         "Found ulimit of 1024 and failed to automatically increase with error "
                         "current limit exceeds maximum limit. This can cause fd limit errors "
                         "like `OSError: [Errno 24] Too many open files`. Consider increasing "
                         "with ulimit -n")
        elif phase == "config":
            log.emit(API, "INFO", "__init__.py:711", f"Resolved architecture: {m.arch}", 6.0)
            log.emit(API, "INFO", "__init__.py:1750", f"Using max model len {env.ctx}")
            if m.method == "awq":
                log.emit(API, "INFO", "awq_marlin.py:120",
                         "The model is convertible to awq_marlin during runtime. Using awq_marlin "
                         "kernel.")
            elif m.method == "gptq":
                log.emit(API, "INFO", "gptq_marlin.py:198",
                         "The model is convertible to gptq_marlin during runtime. Using "
                         "gptq_marlin kernel.")
            if env.kv_format.startswith("fp8"):
                log.emit(API, "INFO", "cache.py:140",
                         "Using fp8 data type to store kv cache. It reduces the GPU memory "
                         "footprint and boosts the performance. Meanwhile, it may cause accuracy "
                         "drop without a proper scaling factor.")
            log.emit(API, "INFO", "scheduler.py:222",
                     "Chunked prefill is enabled with max_num_batched_tokens=2048.")
            log.emit(log.engine, "INFO", "core.py:654", "Waiting for init message from front-end.",
                     3.0)
            log.emit(log.engine, "INFO", "core.py:73",
                     f"Initializing a V1 LLM engine (v{env.version}) with config: "
                     f"{_config_repr(env)}")
            # vLLM's FlashAttention probe: an ERROR line on pre-Ampere cards, and on
            # Ampere/Ada when FA3 was asked for (VLLM_FLASH_ATTN_VERSION=3); harmless
            # in itself, the engine falls back.
            wanted = 2 if env.sm < 8.0 else 3 if env.sm in (8.6, 8.9) and rng.random() < 0.1 else 0
            if wanted:
                log.emit(log.engine, "ERROR" if wanted == 2 else "WARNING", "fa_utils.py:57",
                         f"Cannot use FA version {wanted} is not supported due to FA3 is only "
                         "supported on devices with compute capability >= 8 excluding 8.6 and "
                         "8.9 and Blackwell archs (>=10)")
        elif phase == "dist":
            if env.tp > 1:
                log.emit(log.engine, "WARNING", "multiproc_worker_utils.py:273",
                         "Reducing Torch parallelism from 16 threads to 1 to avoid unnecessary "
                         "CPU contention. Set OMP_NUM_THREADS in the external environment to tune "
                         "this value as needed.")
                log.emit(log.engine, "INFO", "shm_broadcast.py:289",
                         "vLLM message queue communication handle: "
                         f"Handle(local_reader_ranks={list(range(env.tp))}, "
                         f"buffer_handle=({env.tp}, 16777216, 10, 'psm_{_hex(rng, 8)}'), "
                         f"local_subscribe_addr='ipc:///tmp/{_uuid(rng)}', "
                         "remote_subscribe_addr=None, remote_addr_ipv6=False)")
            for r, w in enumerate(log.workers()):
                if env.tp > 1:
                    log.emit(w, "INFO", "__init__.py:1418", "Found nccl from library libnccl.so.2")
                    log.emit(w, "INFO", "pynccl.py:70", "vLLM is using nccl==2.26.2")
                    if env.gpu_name.startswith("NVIDIA GeForce"):
                        log.emit(w, "WARNING", "custom_all_reduce.py:147",
                                 "Custom allreduce is disabled because your platform lacks GPU "
                                 "P2P capability or P2P test failed. To silence this warning, "
                                 "specify disable_custom_all_reduce=True explicitly.")
                log.emit(w, "INFO", "parallel_state.py:1134",
                         f"rank {r} in world size {env.tp} is assigned as DP rank 0, PP rank 0, TP "
                         f"rank {r}, EP rank {r}")
                if rng.random() < 0.5:
                    log.emit(w, "INFO", "topk_topp_sampler.py:50",
                             "Using FlashInfer for top-p & top-k sampling.")
                else:
                    log.emit(w, "WARNING", "topk_topp_sampler.py:61",
                             "FlashInfer is not available. Falling back to the PyTorch-native "
                             "implementation of top-p & top-k sampling. For the best performance, "
                             "please install FlashInfer.")
        elif phase == "load":
            for w in log.workers():
                log.emit(w, "INFO", "gpu_model_runner.py:1953",
                         f"Starting to load model {m.slug}...", 1.0)
                log.emit(w, "INFO", "gpu_model_runner.py:1985", "Loading model from scratch...")
                backend = "Flash Attention" if env.sm >= 8.0 else "XFormers"
                log.emit(w, "INFO", "cuda.py:328", f"Using {backend} backend on V1 engine.")
            log.emit(log.engine, "INFO", "weight_utils.py:296",
                     "Using model weights format ['*.safetensors']")
            shards = max(1, int(m.params_b * (0.28 if m.method in ("awq", "gptq") else 0.5)))
            done = int(shards * frac)
            elapsed = 0.0
            for k in range(done + 1):
                pct = int(100 * k / shards)
                elapsed += rng.uniform(0.9, 6.0) if k else 0.0
                rate = f"{elapsed / max(k, 1):.2f}s/it" if k else "?, ?it/s"
                log.raw(log.engine, f"Loading safetensors checkpoint shards: {pct:3d}% Completed | "
                                    f"{k}/{shards} "
                                    f"[{int(elapsed) // 60:02d}:{int(elapsed) % 60:02d}<{rate}]")
                log.t += timedelta(seconds=elapsed / max(k, 1))
            if frac < 1.0:
                continue
            for w in log.workers():
                took = rng.uniform(4.0, 90.0)
                log.emit(w, "INFO", "default_loader.py:272",
                         f"Loading weights took {took:.2f} seconds")
                log.emit(w, "INFO", "gpu_model_runner.py:2007",
                         f"Model loading took {env.extra.get('weights_gib', 7.0):.4f} GiB and "
                         f"{took + rng.uniform(0.3, 2.0):.6f} seconds")
        elif phase == "compile":
            for r, w in enumerate(log.workers()):
                log.emit(w, "INFO", "backends.py:548",
                         "Using cache directory: "
                         f"~/.cache/vllm/torch_compile_cache/{_hex(rng, 10)}/rank_{r}_0/backbone "
                         "for vLLM's torch.compile")
                log.emit(w, "INFO", "backends.py:559",
                         f"Dynamo bytecode transform time: {rng.uniform(3, 14):.2f} s", 9)
                if frac < 1.0:
                    continue
                if rng.random() < 0.5:
                    log.emit(w, "INFO", "backends.py:161",
                             "Directly load the compiled graph(s) for dynamic shape from the "
                             f"cache, took {rng.uniform(1, 6):.3f} s", 5)
                else:
                    log.emit(w, "INFO", "backends.py:194",
                             "Cache the graph for dynamic shape for later use", 5)
                    log.emit(w, "INFO", "backends.py:215",
                             f"Compiling a graph for dynamic shape takes {rng.uniform(15, 70):.2f} "
                             "s", 40)
                log.emit(w, "INFO", "monitor.py:34",
                         f"torch.compile takes {rng.uniform(20, 90):.2f} s in total")
        elif phase == "profile":
            avail = env.extra.setdefault("kv_avail_gib",
                                         round(rng.uniform(0.8, env.vram_gib * 0.5), 2))
            if env.style == "plain":
                log.emit(log.engine, "INFO", "worker.py:294",
                         f"Memory profiling takes {rng.uniform(3, 12):.2f} seconds", 8)
                log.raw(log.engine,
                        "the current vLLM instance can use total_gpu_memory "
                        f"({env.vram_gib:.2f}GiB) x gpu_memory_utilization (0.92) = "
                        f"{env.vram_gib * 0.92:.2f}GiB")
                log.raw(log.engine,
                        f"model weights take {env.extra.get('weights_gib', 7.0):.2f}GiB; "
                        f"non_torch_memory takes {rng.uniform(0.05, 0.4):.2f}GiB; "
                        "PyTorch activation peak memory takes "
                        f"{rng.uniform(0.8, 3.0):.2f}GiB; the rest of the memory "
                        f"reserved for KV Cache is {avail:.2f}GiB.")
            for w in log.workers():
                log.emit(w, "INFO", "gpu_worker.py:276",
                         f"Available KV cache memory: {avail:.2f} GiB", 8)
            tokens = int(avail * 1024 * rng.uniform(12, 40))
            log.emit(log.engine, "INFO", "kv_cache_utils.py:849",
                     f"GPU KV cache size: {tokens:,} tokens")
            log.emit(log.engine, "INFO", "kv_cache_utils.py:853",
                     f"Maximum concurrency for {env.ctx:,} tokens per request: "
                     f"{tokens / env.ctx:.2f}x")
        elif phase == "graphs":
            steps = 67
            upto = int(steps * frac)
            for k in range(0, upto + 1, rng.choice((6, 9, 12))):
                pct = int(100 * k / steps)
                filled = pct // 10
                bar = "█" * filled + ("▍" if pct % 10 >= 5 else " ") + " " * (9 - filled)
                log.raw(log.engine,
                        f"Capturing CUDA graph shapes: {pct:3d}%|{bar[:10]}| {k}/{steps} "
                        f"[00:{k // 7:02d}<00:{(steps - k) // 7:02d}, "
                        f"{rng.uniform(5, 9):.2f}it/s]")
            if frac < 1.0:
                continue
            log.emit(log.engine, "INFO", "gpu_model_runner.py:2708",
                     f"Graph capturing finished in {rng.randrange(5, 40)} secs, took "
                     f"{rng.uniform(0.2, 1.4):.2f} GiB", 20)
            log.emit(log.engine, "INFO", "core.py:214",
                     "init engine (profile, create kv cache, warmup model) took "
                     f"{rng.uniform(40, 240):.2f} seconds")
        elif phase == "ready":
            log.emit(API, "INFO", "loggers.py:142",
                     "Engine 000: vllm cache_config_info with initialization after num_gpu_blocks "
                     f"is: {rng.randrange(800, 9000)}")
            log.emit(API, "INFO", "api_server.py:1611", "Supported_tasks: ['generate']")
            log.emit(API, "INFO", "api_server.py:1880",
                     "Starting vLLM API server 0 on http://0.0.0.0:8000")
            log.emit(API, "INFO", "launcher.py:36", "Available routes are:")
            for route, methods in ROUTES:
                log.emit(API, "INFO", "launcher.py:44", f"Route: {route}, Methods: {methods}", 0.0)


def _frames(log: Log, proc: str | None, frames: list[tuple[str, int, str, str]], *,
            level_src: str | None = None) -> None:
    """A Python traceback, either raw or as ``ERROR .. [src]`` lines (vLLM's logger)."""
    log.begin_error()

    def put(text: str) -> None:
        if level_src:
            log.raw(proc, f"ERROR {log.t:%m-%d %H:%M:%S} [{level_src}] {text}")
        else:
            log.raw(proc, text)

    put("Traceback (most recent call last):")
    for path, line, func, code in frames:
        full = path if path.startswith(("/", "<")) else f"{PY}/{path}"
        put(f'  File "{full}", line {line}, in {func}')
        if code:
            put(f"    {code}")


def _final(log: Log, proc: str | None, lines: list[str], level_src: str | None = None) -> None:
    for text in lines:
        if level_src:
            log.raw(proc, f"ERROR {log.t:%m-%d %H:%M:%S} [{level_src}] {text}")
        else:
            log.raw(proc, text)


F = tuple[str, int, str, str]
ENGINE_INIT: list[F] = [
    ("vllm/v1/engine/core.py", 691, "run_engine_core",
     "engine_core = EngineCoreProc(*args, **kwargs)"),
    ("vllm/v1/engine/core.py", 492, "__init__",
     "super().__init__(vllm_config, executor_class, log_stats,"),
]
KV_INIT: list[F] = [
    ("vllm/v1/engine/core.py", 89, "__init__", "self._initialize_kv_caches(vllm_config)"),
    ("vllm/v1/engine/core.py", 179, "_initialize_kv_caches",
     "self.model_executor.determine_available_memory())"),
    ("vllm/v1/executor/abstract.py", 76, "determine_available_memory",
     'output = self.collective_rpc("determine_available_memory")'),
    ("vllm/executor/uniproc_executor.py", 58, "collective_rpc",
     "answer = run_method(self.driver_worker, method, args, kwargs)"),
    ("vllm/utils/__init__.py", 3007, "run_method", "return func(*args, **kwargs)"),
    ("torch/utils/_contextlib.py", 116, "decorate_context", "return func(*args, **kwargs)"),
    ("vllm/v1/worker/gpu_worker.py", 243, "determine_available_memory",
     "self.model_runner.profile_run()"),
    ("vllm/v1/worker/gpu_model_runner.py", 2627, "profile_run",
     "= self._dummy_run(self.max_num_tokens, is_profile=True)"),
    ("torch/utils/_contextlib.py", 116, "decorate_context", "return func(*args, **kwargs)"),
    ("vllm/v1/worker/gpu_model_runner.py", 2393, "_dummy_run", "outputs = self.model("),
    ("vllm/compilation/cuda_graph.py", 115, "__call__", "return self.runnable(*args, **kwargs)"),
    ("torch/nn/modules/module.py", 1773, "_wrapped_call_impl",
     "return self._call_impl(*args, **kwargs)"),
    ("torch/nn/modules/module.py", 1784, "_call_impl", "return forward_call(*args, **kwargs)"),
]
KV_CHECK: list[F] = [
    ("vllm/v1/engine/core.py", 89, "__init__", "self._initialize_kv_caches(vllm_config)"),
    ("vllm/v1/engine/core.py", 192, "_initialize_kv_caches", "kv_cache_configs = ["),
    ("vllm/v1/engine/core.py", 193, "<listcomp>",
     "get_kv_cache_config(vllm_config, kv_cache_spec_one_worker,"),
    ("vllm/v1/core/kv_cache_utils.py", 1095, "get_kv_cache_config",
     "check_enough_kv_cache_memory(vllm_config, kv_cache_spec, available_memory)"),
    ("vllm/v1/core/kv_cache_utils.py", 699, "check_enough_kv_cache_memory", "raise ValueError("),
]
LOAD_MODEL: list[F] = [
    ("vllm/v1/engine/core.py", 83, "__init__", "self.model_executor = executor_class(vllm_config)"),
    ("vllm/executor/executor_base.py", 54, "__init__", "self._init_executor()"),
    ("vllm/executor/uniproc_executor.py", 49, "_init_executor",
     'self.collective_rpc("load_model")'),
    ("vllm/executor/uniproc_executor.py", 58, "collective_rpc",
     "answer = run_method(self.driver_worker, method, args, kwargs)"),
    ("vllm/utils/__init__.py", 3007, "run_method", "return func(*args, **kwargs)"),
    ("vllm/v1/worker/gpu_worker.py", 213, "load_model",
     "self.model_runner.load_model(eep_scale_up=eep_scale_up)"),
    ("vllm/v1/worker/gpu_model_runner.py", 1986, "load_model",
     "self.model = model_loader.load_model("),
    ("vllm/model_executor/model_loader/base_loader.py", 44, "load_model",
     "model = initialize_model(vllm_config=vllm_config,"),
]
LOAD_WEIGHTS: list[F] = [
    ("vllm/model_executor/model_loader/base_loader.py", 49, "load_model",
     "self.load_weights(model, model_config)"),
    ("vllm/model_executor/model_loader/default_loader.py", 259, "load_weights",
     "loaded_weights = model.load_weights("),
    ("vllm/model_executor/models/qwen2.py", 497, "load_weights",
     "return loader.load_weights(weights)"),
    ("vllm/model_executor/models/utils.py", 291, "load_weights",
     'autoloaded_weights = set(self._load_module("", self.module, weights))'),
    ("vllm/model_executor/models/utils.py", 249, "_load_module",
     "yield from self._load_module(prefix,"),
    ("vllm/model_executor/layers/linear.py", 1284, "weight_loader",
     "param_data.copy_(loaded_weight)"),
]
MODEL_CLS: list[F] = [
    ("vllm/model_executor/model_loader/utils.py", 54, "initialize_model",
     "model_class, _ = get_model_architecture(model_config)"),
    ("vllm/model_executor/model_loader/utils.py", 190, "get_model_architecture",
     "model_cls, arch = model_config.registry.resolve_model_cls("),
    ("vllm/model_executor/models/registry.py", 585, "resolve_model_cls",
     "model_cls = self._try_load_model_cls(arch)"),
    ("vllm/model_executor/models/registry.py", 533, "_try_load_model_cls",
     "return _try_load_model_cls(model_arch, self.models[model_arch])"),
    ("vllm/model_executor/models/registry.py", 470, "_try_load_model_cls",
     "return model.load_model_cls()"),
    ("vllm/model_executor/models/registry.py", 410, "load_model_cls",
     "mod = importlib.import_module(self.module_name)"),
    ("/usr/lib/python3.12/importlib/__init__.py", 90, "import_module",
     "return _bootstrap._gcd_import(name[level:], package, level)"),
    ("<frozen importlib._bootstrap>", 1387, "_gcd_import", ""),
    ("<frozen importlib._bootstrap>", 1360, "_find_and_load", ""),
    ("<frozen importlib._bootstrap>", 1331, "_find_and_load_unlocked", ""),
    ("<frozen importlib._bootstrap>", 935, "_load_unlocked", ""),
    ("<frozen importlib._bootstrap_external>", 995, "exec_module", ""),
    ("<frozen importlib._bootstrap>", 488, "_call_with_frames_removed", ""),
]
API_MAIN: list[F] = [
    ("/usr/local/bin/vllm", 10, "<module>", "sys.exit(main())"),
    ("vllm/entrypoints/cli/main.py", 54, "main", "args.dispatch_function(args)"),
    ("vllm/entrypoints/cli/serve.py", 57, "cmd", "uvloop.run(run_server(args))"),
    ("uvloop/__init__.py", 109, "run", "return __asyncio.run("),
    ("/usr/lib/python3.12/asyncio/runners.py", 195, "run", "return runner.run(main)"),
    ("/usr/lib/python3.12/asyncio/runners.py", 118, "run",
     "return self._loop.run_until_complete(task)"),
    ("uvloop/loop.pyx", 1518, "uvloop.loop.Loop.run_until_complete", ""),
    ("uvloop/__init__.py", 61, "wrapper", "return await main"),
    ("vllm/entrypoints/openai/api_server.py", 1850, "run_server",
     "await run_server_worker(listen_address, sock, args, **uvicorn_kwargs)"),
    ("vllm/entrypoints/openai/api_server.py", 1870, "run_server_worker",
     "async with build_async_engine_client("),
    ("/usr/lib/python3.12/contextlib.py", 210, "__aenter__", "return await anext(self.gen)"),
    ("vllm/entrypoints/openai/api_server.py", 178, "build_async_engine_client",
     "async with build_async_engine_client_from_engine_args("),
    ("/usr/lib/python3.12/contextlib.py", 210, "__aenter__", "return await anext(self.gen)"),
]
API_ENGINE_WAIT: list[F] = [
    ("vllm/entrypoints/openai/api_server.py", 220, "build_async_engine_client_from_engine_args",
     "async_llm = AsyncLLM.from_vllm_config("),
    ("vllm/utils/__init__.py", 1557, "inner", "return fn(*args, **kwargs)"),
    ("vllm/v1/engine/async_llm.py", 174, "from_vllm_config", "return cls("),
    ("vllm/v1/engine/async_llm.py", 120, "__init__",
     "self.engine_core = EngineCoreClient.make_async_mp_client("),
    ("vllm/v1/engine/core_client.py", 102, "make_async_mp_client",
     "return AsyncMPClient(*client_args)"),
    ("vllm/v1/engine/core_client.py", 767, "__init__", "super().__init__("),
    ("vllm/v1/engine/core_client.py", 446, "__init__",
     "with launch_core_engines(vllm_config, executor_class,"),
    ("/usr/lib/python3.12/contextlib.py", 144, "__exit__", "next(self.gen)"),
    ("vllm/v1/engine/utils.py", 706, "launch_core_engines", "wait_for_engine_startup("),
    ("vllm/v1/engine/utils.py", 759, "wait_for_engine_startup",
     'raise RuntimeError("Engine core initialization failed. "'),
]
API_CONFIG: list[F] = [
    ("vllm/entrypoints/openai/api_server.py", 203, "build_async_engine_client_from_engine_args",
     "vllm_config = engine_args.create_engine_config(usage_context=usage_context)"),
    ("vllm/engine/arg_utils.py", 1091, "create_engine_config",
     "model_config = self.create_model_config()"),
    ("vllm/engine/arg_utils.py", 949, "create_model_config", "return ModelConfig("),
    ("pydantic/_internal/_dataclasses.py", 123, "__init__",
     "s.__pydantic_validator__.validate_python(ArgsKwargs(args, kwargs), self_instance=s)"),
]
PROC_BOOT: list[F] = [
    ("/usr/lib/python3.12/multiprocessing/process.py", 314, "_bootstrap", "self.run()"),
    ("/usr/lib/python3.12/multiprocessing/process.py", 108, "run",
     "self._target(*self._args, **self._kwargs)"),
    ("vllm/v1/engine/core.py", 704, "run_engine_core", "raise e"),
]
ENGINE_FAILED = ("RuntimeError: Engine core initialization failed. See root cause above. Failed "
                 "core proc(s): {}")


def _engine_error(log: Log, frames: list[F], final: list[str], *,
                  in_worker: bool | None = None) -> None:
    """A root error in the engine core (or a TP worker), then the API server's wrapper."""
    env = log.env
    worker = env.tp > 1 if in_worker is None else in_worker
    log.begin_error()
    log.t += timedelta(seconds=log.rng.uniform(0.2, 3.0))
    if worker:
        w = log.workers()[0]
        src = "multiproc_executor.py:596"
        log.raw(w, f"ERROR {log.t:%m-%d %H:%M:%S} [{src}] WorkerProc failed to start.")
        _frames(log, w, frames[-8:], level_src=src)
        _final(log, w, final, src)
        log.emit(log.engine, "INFO", "multiproc_executor.py:558",
                 "Parent process exited, terminating worker", 0.5)
        short = final[-1].split(": ", 1)[-1][:160]
        final = [f"RuntimeError: Worker failed with error '{short}', please check the stack trace "
                 "above for the root cause"]
        frames = ENGINE_INIT + [("vllm/v1/executor/multiproc_executor.py", 108, "_init_executor",
                                 "self.workers = WorkerProc.wait_for_ready(unready_workers)")]
    src = "core.py:700"
    log.raw(log.engine, f"ERROR {log.t:%m-%d %H:%M:%S} [{src}] EngineCore failed to start.")
    _frames(log, log.engine, ENGINE_INIT + frames if not worker else frames, level_src=src)
    _final(log, log.engine, final, src)
    if env.style == "v1":
        log.raw(log.engine, "Process EngineCore_0:")
        _frames(log, log.engine, PROC_BOOT + (frames if worker else ENGINE_INIT + frames)[-6:])
        _final(log, log.engine, final)
    if log.rng.random() < 0.85:
        _frames(log, API, API_MAIN + API_ENGINE_WAIT)
        _final(log, API, [ENGINE_FAILED])


def _api_error(log: Log, frames: list[F], final: list[str]) -> None:
    log.t += timedelta(seconds=log.rng.uniform(0.1, 2.0))
    _frames(log, API, API_MAIN + frames)
    _final(log, API, final)


# ----------------------------------------------------------- failure scenarios (log builders)


def _gib(x: float) -> str:
    return f"{x:.2f}"


def _sticky(log: Log, key: str, make: Callable[[], Any]) -> Any:
    """A choice made once per bundle, so a restarted container fails the same way."""
    if key not in log.env.extra:
        log.env.extra[key] = make()
    return log.env.extra[key]


def _oom_torch(log: Log) -> None:
    env, rng = log.env, log.rng
    where = _sticky(log, "where", lambda: rng.choice(("profile", "profile", "load", "graphs")))
    _startup(log, where, partial=0.6 if where == "load" else 0.0)
    total = env.vram_gib
    alloc = rng.choice((0.25, 0.5, 1.0, 1.25, 1.95, 2.5, 3.5, 4.0, 7.0)) * rng.uniform(0.8, 1.2)
    free_mib = rng.uniform(20, 900)
    used = total - free_mib / 1024
    if env.style == "v1" or _sticky(log, "new_torch", lambda: rng.random() < 0.5):
        final = [
            f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {_gib(alloc)} GiB. GPU "
            f"0 has a total capacity of {_gib(total)} GiB of which {free_mib:.2f} MiB is free. "
            f"Including non-PyTorch memory, this process has {_gib(used)} GiB memory in use. Of "
            f"the allocated memory {_gib(used - 0.7)} GiB is allocated by PyTorch, and "
            f"{rng.uniform(20, 600):.2f} MiB is reserved by PyTorch but unallocated. If reserved "
            "but unallocated memory is large try setting "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
            "documentation for Memory Management  "
            "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"]
    else:
        final = [
            f"torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate {_gib(alloc)} GiB "
            f"(GPU 0; {_gib(total)} GiB total capacity; {_gib(used - 0.4)} GiB already allocated; "
            f"{free_mib:.2f} MiB free; {_gib(used)} GiB reserved in total by PyTorch) If reserved "
            "memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.  "
            "See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF"]
    if where == "load":
        frames = LOAD_MODEL + LOAD_WEIGHTS
    else:
        frames = KV_INIT + [("vllm/model_executor/models/llama.py", 388, "forward",
                             "hidden_states, residual = layer(positions, hidden_states, residual)"),
                            ("vllm/model_executor/layers/activation.py", 87, "forward_cuda",
                             "out = torch.empty(output_shape, dtype=x.dtype, device=x.device)")]
    _engine_error(log, frames, final)


def _oom_kv_cache(log: Log) -> None:
    env, rng = log.env, log.rng
    _startup(log, "profile", partial=1.0)
    avail = env.extra["kv_avail_gib"]
    if env.style == "plain" and _sticky(log, "v0_blocks", lambda: rng.random() < 0.4):
        final = ["ValueError: No available memory for the cache blocks. Try increasing "
                 "`gpu_memory_utilization` when initializing the engine."]
        frames = KV_CHECK[:2] + [("vllm/v1/core/kv_cache_utils.py", 611,
                                  "check_enough_kv_cache_memory",
                                  'raise ValueError("No available memory for the cache blocks. "')]
    else:
        needed = avail * rng.uniform(1.05, 2.5)
        est = int(env.ctx * avail / needed)
        final = [
            f"ValueError: To serve at least one request with the models's max seq len ({env.ctx}), "
            f"({_gib(needed)} GiB KV cache is needed, which is larger than the available KV cache "
            f"memory ({_gib(avail)} GiB). Based on the available memory, the estimated maximum "
            f"model length is {est}. Try increasing `gpu_memory_utilization` or decreasing "
            "`max_model_len` when initializing the engine."]
        frames = KV_CHECK
    _engine_error(log, frames, final, in_worker=False)


def _quant_config(log: Log) -> None:
    env, rng = log.env, log.rng
    m = env.model
    method = m.method or "awq"
    other = "gptq" if method == "awq" else "awq"
    variant = _sticky(log, "variant", lambda: rng.randrange(5))
    if variant == 0:
        _startup(log, "config")
        final = [f"ValueError: Cannot find the config file for {method}"]
        _api_error(log, API_CONFIG + [("vllm/config/__init__.py", 1021, "_parse_quant_hf_config",
                                       "quant_cfg = get_quantization_config(self.model, "
                                       "self.quantization)")], final)
    elif variant == 1:
        _startup(log, "config")
        final = [f"ValueError: torch.bfloat16 is not supported for quantization method {method}. "
                 "Supported dtypes: [torch.float16]"]
        _api_error(log, API_CONFIG + [
            ("vllm/config/__init__.py", 639, "__post_init__", "self._verify_quantization()"),
            ("vllm/config/__init__.py", 1049, "_verify_quantization", "raise ValueError(")], final)
    elif variant == 2:
        _startup(log, "config")
        final = [f"ValueError: Quantization method specified in the model config ({other}) does "
                 "not match the quantization method specified in the `quantization` argument "
                 f"({method})."]
        _api_error(log, API_CONFIG + [
            ("vllm/config/__init__.py", 1067, "_verify_quantization", "raise ValueError(")], final)
    elif variant == 3:
        _startup(log, "load", partial=0.4)
        final = ["ValueError: Weight input_size_per_partition = "
                 f"{rng.choice((10944, 13824, 14336, 18944))} is not divisible by min_thread_k = "
                 "128. Consider reducing tensor_parallel_size or running with --quantization "
                 f"{other}."]
        _engine_error(log, LOAD_MODEL + [
            ("vllm/model_executor/layers/quantization/gptq_marlin.py", 274, "create_weights",
             "verify_marlin_supports_shape("),
            ("vllm/model_executor/layers/quantization/utils/marlin_utils.py", 183,
             "verify_marlin_supports_shape",
             "raise ValueError(f\"Weight input_size_per_partition = \"")], final)
    else:
        _startup(log, "load", partial=0.6)
        final = ["ValueError: Currently, only 4/8-bit weight quantization is supported for "
                 f"{method.upper()}, but got 3 bits."]
        _engine_error(log, LOAD_MODEL + [
            ("vllm/model_executor/layers/quantization/gptq.py", 59, "__init__",
             "raise ValueError(")], final)


def _arch_unsupported(log: Log) -> None:
    env = log.env
    _startup(log, "config")
    archs = ", ".join(repr(a) for a in SUPPORTED_ARCHS)
    arch, slug = env.model.arch, env.model.slug
    unsupported = (f"Model architectures ['{arch}'] are not supported for now. Supported "
                   f"architectures: dict_keys([{archs}])")
    if env.style == "v1":
        final = ["pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig",
                 f"  Value error, {unsupported} [type=value_error, input_value=ArgsKwargs((), "
                 f"{{'model': '{slug}', 'runner': 'auto', 'convert': 'auto', 'tokenizer': "
                 f"'{slug}', ...rust_remote_code': False}}), input_type=ArgsKwargs]",
                 "    For further information visit https://errors.pydantic.dev/2.11/v/value_error"]
    else:
        final = [f"ValueError: {unsupported}"]
    _api_error(log, API_CONFIG, final)


_IMPORTS = (
    ("fused_experts_impl", "vllm.model_executor.layers.fused_moe.fused_moe",
     "vllm/model_executor/layers/fused_moe/fused_moe.py"),
    ("RMSNormGated", "vllm.model_executor.layers.layernorm",
     "vllm/model_executor/layers/layernorm.py"),
    ("get_rope", "vllm.model_executor.layers.rotary_embedding",
     "vllm/model_executor/layers/rotary_embedding/__init__.py"),
    ("GenerationConfig", "transformers", "transformers/__init__.py"),
)


def _import_error(log: Log) -> None:
    env, rng = log.env, log.rng
    variant = _sticky(log, "variant", lambda: rng.randrange(4))
    name, module, path = _sticky(log, "import", lambda: rng.choice(_IMPORTS))
    final_import = f"ImportError: cannot import name '{name}' from '{module}' ({PY}/{path})"
    if variant == 0:
        # The overlay image patches vLLM at start-up, before anything is logged.
        _startup(log, "args")
        frames = [("/usr/local/bin/vllm", 5, "<module>",
                   "from vllm.entrypoints.cli.main import main"),
                  ("<PATH>", 12, "<module>", f"from {module} import {name}")]
        log.t += timedelta(seconds=rng.uniform(0.5, 2))
        _frames(log, API, frames)
        _final(log, API, [final_import])
    elif variant == 1:
        _startup(log, "load", partial=0.01)
        module_file = env.model.arch.lower().replace("forcausallm", "")
        _engine_error(log, LOAD_MODEL + MODEL_CLS + [
            (f"vllm/model_executor/models/{module_file}.py", 41, "<module>",
             f"from {module} import {name}")], [final_import])
    elif variant == 2:
        _startup(log, "load")
        attr = _sticky(log, "attr", lambda: rng.choice(("rope_theta", "activation", "head_dim",
                                                         "sliding_window_pattern")))
        final = [f"AttributeError: '{env.model.arch.replace('ForCausalLM', 'Config')}' object has "
                 f"no attribute '{attr}'"]
        _engine_error(log, LOAD_MODEL + [
            ("vllm/model_executor/model_loader/utils.py", 64, "initialize_model",
             'return model_class(vllm_config=vllm_config, prefix=prefix)'),
            ("vllm/model_executor/models/qwen2.py", 281, "__init__",
             f"self.{attr} = config.{attr}")], final)
    else:
        _startup(log, "import")
        log.t += timedelta(seconds=rng.uniform(0.5, 2))
        _frames(log, None, [
            ("/usr/local/bin/vllm", 5, "<module>", "from vllm.entrypoints.cli.main import main"),
            ("vllm/__init__.py", 14, "<module>", "import vllm.env_override  # noqa: F401"),
            ("vllm/env_override.py", 5, "<module>", "import torch"),
            ("vllm/_custom_ops.py", 14, "<module>", "import vllm._C  # noqa")])
        _final(log, None, ["ModuleNotFoundError: No module named 'vllm._C'"])


_CUDA_NOTE = ["CUDA kernel errors might be asynchronously reported at some other API call, so the "
              "stacktrace below might be incorrect.",
              "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
              "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions."]


def _no_kernel_image(log: Log) -> None:
    rng = log.rng
    _startup(log, _sticky(log, "where", lambda: rng.choice(("load", "profile"))), partial=0.3)
    final = ["RuntimeError: CUDA error: no kernel image is available for execution on the device",
             *_CUDA_NOTE]
    _engine_error(log, KV_INIT[:8] + [("vllm/_custom_ops.py", 231, "rms_norm",
                                       "torch.ops._C.rms_norm(out, input, weight, epsilon)"),
                                      ("torch/_ops.py", 1243, "__call__",
                                       "return self._op(*args, **kwargs)")], final)


def _fa3_hopper(log: Log) -> None:
    env, rng = log.env, log.rng
    if _sticky(log, "fp8", lambda: env.model.method == "fp8" and rng.random() < 0.7):
        _startup(log, "config")
        final = ["ValueError: The quantization method fp8 is not supported for the current GPU. "
                 f"Minimum capability: 89. Current capability: {int(env.sm * 10)}."]
        _api_error(log, API_CONFIG + [
            ("vllm/config/__init__.py", 1098, "_verify_quantization", "raise ValueError(")], final)
        return
    _startup(log, "load", partial=0.02)
    final = ["RuntimeError: FlashAttention-3 requires Hopper GPUs (sm_90); got compute capability "
             f"{env.sm} on {env.gpu_name}. Set VLLM_FLASH_ATTN_VERSION=2 to use FlashAttention-2."]
    _engine_error(log, LOAD_MODEL + [
        ("vllm/attention/layer.py", 176, "__init__",
         "self.impl = impl_cls(num_heads, head_size, scale, num_kv_heads,"),
        ("vllm/v1/attention/backends/flash_attn.py", 422, "__init__",
         "self.vllm_flash_attn_version = get_flash_attn_version()"),
        ("vllm/attention/utils/fa_utils.py", 62, "get_flash_attn_version",
         'assert is_fa_version_supported(fa_version), "FA3 requires Hopper"')], final)


def _unknown_error(log: Log) -> None:
    env, rng = log.env, log.rng
    variant = _sticky(log, "variant", lambda: rng.randrange(6))
    if variant == 0 and env.tp > 1:
        _startup(log, "dist")
        _engine_error(log, [
            ("vllm/distributed/device_communicators/pynccl.py", 99, "__init__",
             "self.comm: ncclComm_t = self.nccl.ncclCommInitRank("),
            ("vllm/distributed/device_communicators/pynccl_wrapper.py", 277, "NCCL_CHECK",
             'raise RuntimeError(f"NCCL error: {error_str}")')],
                      ["RuntimeError: NCCL error: unhandled system error (run with "
                       "NCCL_DEBUG=INFO for details)"],
                      in_worker=True)
    elif variant <= 1:
        _startup(log, "graphs", partial=0.5)
        _engine_error(log, KV_INIT[:8] + [
            ("vllm/v1/worker/gpu_model_runner.py", 2672, "capture_model",
             "self._dummy_run(num_tokens, capture_attn_cudagraph=full_cg)")],
            ["RuntimeError: CUDA error: an illegal memory access was encountered", *_CUDA_NOTE])
    elif variant == 2:
        _startup(log, "args")
        repo = env.model.slug
        request = f"Root=1-{_hex(rng, 8)}-{_hex(rng, 24)};{_uuid(rng)}"
        frames = [("vllm/transformers_utils/config.py", 370, "get_config",
                   "config_dict, _ = PretrainedConfig.get_config_dict("),
                  ("huggingface_hub/utils/_http.py", 426, "hf_raise_for_status",
                   "raise _format(GatedRepoError, message, response) from e")]
        _api_error(log, API_CONFIG[:3] + frames, [
            f"huggingface_hub.errors.GatedRepoError: 401 Client Error. (Request ID: {request})", "",
            "Cannot access gated repo for url "
            f"https://huggingface.co/{repo}/resolve/main/config.json.",
            f"Access to model {repo} is restricted. You must have access to it and be "
            "authenticated to access it. Please log in."])
    elif variant == 3:
        _startup(log, "ready")
        log.raw(API, "INFO:     Started server process [1]")
        log.raw(API, "INFO:     Waiting for application startup.")
        log.raw(API, "INFO:     Application startup complete.")
        log.begin_error()
        log.raw(API, "ERROR:    [Errno 98] error while attempting to bind on address "
                     "('0.0.0.0', 8000): address already in use")
        log.raw(API, "INFO:     Waiting for application shutdown.")
        log.raw(API, "INFO:     Application shutdown complete.")
    elif variant == 4:
        _startup(log, "load", partial=0.7)
        log.t += timedelta(seconds=rng.uniform(5, 40))
        log.begin_error()
        log.emit(API, "ERROR", "core_client.py:564",
                 "Engine core proc EngineCore_0 died unexpectedly, shutting down client.")
        _frames(log, API, API_MAIN + API_ENGINE_WAIT[:-1])
        _final(log, API, [ENGINE_FAILED])
    else:
        _startup(log, "compile", partial=0.5)
        _engine_error(log, KV_INIT[:10] + [
            ("torch/_inductor/compile_fx.py", 1953, "compile_fx", "return aot_autograd("),
            ("torch/_inductor/codecache.py", 2856, "load_by_key_path",
             "mod = _reload_python_module(key, path)")],
            ["torch._inductor.exc.InductorError: CalledProcessError: Command '['/usr/bin/gcc', "
             "'/tmp/tmpx1b2c3/cuda_utils.c', '-O3', '-shared', '-fPIC', '-Wno-psabi', '-o', "
             "'/tmp/tmpx1b2c3/cuda_utils.cpython-312-x86_64-linux-gnu.so', '-lcuda']' returned "
             "non-zero exit status 1.", "",
             "Set TORCHDYNAMO_VERBOSE=1 for the internal stack trace (please do this especially "
             "if you're reporting a bug to PyTorch). For even more developer context, set "
             "TORCH_LOGS=\"+dynamo\""])


def _cold_start(log: Log) -> None:
    rng = log.rng
    _startup(log, rng.choice(("load", "compile", "graphs")), partial=rng.uniform(0.3, 0.95))


LOG_BUILDERS: dict[str, Callable[[Log], None]] = {
    "oom-torch": _oom_torch,
    "oom-kv-cache": _oom_kv_cache,
    "quant-config": _quant_config,
    "arch-unsupported": _arch_unsupported,
    "import-error": _import_error,
    "no-kernel-image": _no_kernel_image,
    "fa3-hopper": _fa3_hopper,
    "unknown-error": _unknown_error,
    "cold-start": _cold_start,
}


MIN_EXCERPT, MAX_EXCERPT = 2048, 20480


def _tail(text: str, limit: int) -> str:
    """About the last ``limit`` characters, cut at a line start; 400 lines at most.

    Never less than ``MIN_EXCERPT`` characters when the text has them, even if
    a long line must be kept whole to get there.
    """
    lines = text.split("\n")[-400:]
    out: list[str] = []
    size = 0
    for line in reversed(lines):
        size += len(line) + 1
        if size > limit and out and size - len(line) - 1 >= MIN_EXCERPT:
            break
        out.append(line)
    return "\n".join(reversed(out))


def _excerpt(env: Env, kind: str, options: dict[str, Any], start: datetime) -> tuple[str, float]:
    """A boot log tail for ``kind``; returns ``(excerpt, seconds the boot took)``."""
    rng = env.rng
    target = int(math.exp(rng.uniform(math.log(MIN_EXCERPT), math.log(MAX_EXCERPT))))
    builder = LOG_BUILDERS[kind]
    if "variant" in options:
        env.extra["variant"] = options["variant"]
    aligned = bool(options.get("aligned_restart"))
    restarts = 0
    if kind != "cold-start" and (aligned or rng.random() < 0.25):
        restarts = rng.randrange(1, 3)

    def short(parts: list[str]) -> bool:
        # A fast crash leaves a short log; with `restart: unless-stopped` the
        # tail then also holds earlier attempts.
        return sum(len(a) + 1 for a in parts) < MIN_EXCERPT

    attempts: list[str] = []
    t = start
    keep = 0
    while len(attempts) <= restarts or short(attempts[1:] if aligned else attempts):
        log = Log(env, t)
        builder(log)
        attempts.append(log.text())
        keep = log.error_chars()
        t = log.t + timedelta(seconds=rng.uniform(1, 5))
    if aligned:
        # Cut where an earlier attempt printed its final error, as a tail often does.
        j, after = len(attempts) - 1, 0
        while j > 0 and after < MIN_EXCERPT:
            after += len(attempts[j]) + 1
            j -= 1
        prev = attempts[j].split("\n")
        last_error = max(i for i, line in enumerate(prev) if "Error" in line)
        text = "\n".join(prev[last_error:] + attempts[j + 1:])
    else:
        # The producer keeps 400 lines, which always reach back past the root error.
        text = _tail("\n".join(attempts), max(target, keep))
    seconds = (t - start).total_seconds()
    return text[-65536:], round(seconds, 1)


# --------------------------------------------------------------------------- bundles


def _pt1(env: Env, breakdown: dict[str, float] | None, override: bool) -> dict[str, Any]:
    rng = env.rng
    verdicts = ("fits-clean", "fits-clean", "fits-constrained")
    verdict = "wont-fit" if override else rng.choice(verdicts)
    terminal = "override-accepted" if override else (
        "confirm→proceed" if verdict == "fits-constrained" or rng.random() < 0.3 else "proceed")
    return {"confidence": rng.choice(CONFIDENCES), "hardware_sm": env.sm, "point": "gate",
            "predicted_b_breakdown": breakdown, "profile_like": env.profile, "raw_verdict": verdict,
            "schema": 1, "slug": env.model.slug, "terminal": terminal}


def _pt2(env: Env) -> dict[str, Any]:
    m = env.model
    shards = max(1, int(m.params_b * (0.28 if m.method in ("awq", "gptq") else 0.5)))
    files = ["config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"]
    if shards > 1:
        files += [f"model-{k:05d}-of-{shards:05d}.safetensors" for k in range(1, shards + 1)]
    else:
        files.append("model.safetensors")
    if m.method in ("awq", "gptq"):
        files.append("quant_config.json" if env.rng.random() < 0.5 else "quantize_config.json")
    weights = _weights_gib(m)
    return {"bytes": int(weights * 1024**3 * env.rng.uniform(0.97, 1.03)), "failure": None,
            "files": sorted(files), "ok": True, "point": "download", "sha_verified": True}


def _smoke(env: Env, verdicts: dict[str, str],
           details: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    results = {cap: verdicts.get(cap, "unsmoked") for cap in CAPABILITIES}
    probed = sorted(cap for cap, v in results.items() if v != "unsmoked")
    return {"partial": any(v == "unsmoked" for v in results.values()), "point": "smoke",
            "results": results, "results_detail": details or {}, "smoke_capability_set": probed}


EMPTY_SMOKE = {"partial": False, "point": "smoke", "results": {}, "results_detail": {},
               "smoke_capability_set": []}


def _outcome(pt2: dict[str, Any], pt3: dict[str, Any], pt4: dict[str, Any]) -> str:
    if not pt2["ok"] or not pt3["ok"] or "red" in pt4["results"].values():
        return "failed"
    return "partial" if pt4["partial"] else "ok"


def _green_verdicts(env: Env, all_caps: bool = False) -> dict[str, str]:
    caps = CAPABILITIES if all_caps else FLOOR_CAPS + env.model.caps
    return {cap: "green" for cap in caps}


def _schema1(env: Env, kind: str, options: dict[str, Any]) -> dict[str, Any]:
    rng = env.rng
    m = env.model
    breakdown = _breakdown(env)
    oom = kind in ("oom-torch", "oom-kv-cache")
    override = breakdown is not None and oom and rng.random() < 0.3
    env.extra["weights_gib"] = _weights_gib(m) / env.tp
    boot_start = env.utc - timedelta(seconds=rng.uniform(1200, 2400))
    pt5 = None
    if kind in LOG_BUILDERS or kind == "no-log":
        if kind == "no-log":
            excerpt, seconds = None, round(rng.uniform(300, 900), 1)
        else:
            excerpt, seconds = _excerpt(env, kind, options, boot_start)
        if kind == "cold-start":
            seconds = float(rng.choice((600, 900, 1200)))
        pt3 = {"actual": parse_actual(excerpt), "failure": BOOT_FAILURE,
               "failure_log_excerpt": excerpt, "ok": False, "point": "boot", "seconds": seconds}
        pt4 = _smoke(env, _green_verdicts(env)) if kind == "cold-start" else dict(EMPTY_SMOKE)
        if override:
            pt5 = {"actual": None, "calibration_signal_not_validated": True,
                   "exit_error_summary": BOOT_FAILURE, "point": "override_capture",
                   "predicted_b_breakdown": breakdown, "predicted_vs_actual_delta_mib": None}
    else:
        pt3 = {"failure": None, "ok": True, "point": "boot",
               "seconds": round(rng.uniform(35, 420), 1)}
        served = m.slug.split("/")[-1].lower()
        if kind == "success":
            pt4 = _smoke(env, _green_verdicts(env, options.get("all_caps", False)))
        elif kind == "served-404":
            verdicts = {cap: "red" for cap in FLOOR_CAPS + m.caps}
            body = {"object": "error", "message": f"The model `{m.slug}` does not exist.",
                    "type": "NotFoundError", "param": None, "code": 404}
            detail = f"Error code: 404 - {json.dumps(body, separators=(',', ':'))}"[:240]
            pt4 = _smoke(env, verdicts, {cap: {"error": detail, "status": 404} for cap in verdicts})
        elif kind == "streaming-dead":
            verdicts = {**_green_verdicts(env), "streaming": "red"}
            pt4 = _smoke(env, verdicts, {"streaming": {
                "error": f"stream from {served} closed after 0 chunks without a [DONE] event",
                "status": None}})
        else:  # pragma: no cover - guarded by KIND_WEIGHTS
            raise ValueError(kind)
    pt2 = _pt2(env)
    manifest = {
        "arch_family": m.arch, "capture_points": ["gate", "download", "boot", "smoke"],
        "club3090_commit": env.commit, "engine_pin": env.pin, "engine_version": env.pin,
        "failure_class": None, "kv_calc_version": env.kv_calc, "kv_format": env.kv_format,
        "model": m.slug, "model_id": m.slug, "outcome": _outcome(pt2, pt3, pt4),
        "quant_label": m.quant_label, "schema": 1, "selected_ctx": env.ctx, "slug": m.slug,
        "smoke_capability_set": list(pt4["smoke_capability_set"]), "submission_fingerprint": "",
        "topology_class": env.topology_class, "topology_summary_canonical": env.topology_summary,
        "utc_ts": f"{env.utc:%Y%m%dT%H%M%SZ}",
    }
    manifest["submission_fingerprint"] = submission_fingerprint(manifest)
    return {"manifest": manifest, "pt1": _pt1(env, breakdown, override), "pt2": pt2, "pt3": pt3,
            "pt4": pt4, "pt5": pt5}


_GATE_DETAIL = {
    "disk-short": "need {need:.1f} GiB free under ~/.cache/huggingface, have {have:.1f} GiB",
    "engine-support-unknown/no-arch-row": "no engine support row for {arch} in vllm/vllm-openai; "
                                          "refusing to download",
    "engine-support-unknown/runtime-incompatible": "{arch} needs transformers>=4.56 but the "
                                                   "pinned image ships 4.51.3",
    "hard-block": "exact estimate {need:.1f} GiB > {vram} MiB usable on {gpus}: wont-fit",
    "no-fit-model": "no profile in vllm/* fits {need:.1f} GiB on {gpus}",
    "hardware-sm-undetermined": "nvidia-smi --query-gpu=compute_cap failed: NVIDIA-SMI has failed "
                                "because it couldn't communicate with the NVIDIA driver",
    "repo-not-found": "HF API returned 404 for {slug}",
    "gated-no-token": "{slug} is gated; set HF_TOKEN=<REDACTED> or run `huggingface-cli login`",
    "needs-trust-remote-code-ack": "{slug} ships custom modeling code (auto_map); re-run with "
                                   "--trust-remote-code",
    "unsupported-format": "only GGUF weights found ({slug}); vLLM profiles need safetensors",
    "ambiguous-weight-set": "found both consolidated.safetensors and model-*.safetensors",
    "quant-dtype-unknown": "quantization_config.quant_method 'hqq' is not known to the deriver",
    "confirm-needs-3.2": "profile-like vllm/long-context needs club-3090 >= 3.2",
}


def _gate(env: Env, options: dict[str, Any]) -> dict[str, Any]:
    rng = env.rng
    m = env.model
    token = options.get("token") or _weighted(rng, GATE_TOKENS)
    deriver = token in DERIVER_TOKENS
    no_gpus = token == "hardware-sm-undetermined"
    need = m.params_b * 2.1 + rng.uniform(2, 12)
    detail = _GATE_DETAIL[token].format(need=need, have=need * rng.uniform(0.1, 0.9), arch=m.arch,
                                        vram=min(g[1] for g in env.gpus), gpus=env.topology_summary,
                                        slug=m.slug)
    manifest = {
        "abort_reason": token, "arch_family": None if deriver else m.arch,
        "capture_points": ["gate"], "club3090_commit": env.commit, "engine_pin": None,
        "engine_version": None, "failure_class": None,
        "is_gate_only": True, "kv_calc_version": None, "kv_format": None, "model": m.slug,
        "model_id": m.slug, "outcome": "hard-block",
        "quant_label": None if deriver else m.quant_label, "schema": 2, "selected_ctx": None,
        "slug": m.slug, "smoke_capability_set": None, "submission_fingerprint": None,
        "topology_class": None if no_gpus else env.topology_class,
        "topology_summary_canonical": None if no_gpus else env.topology_summary,
        "utc_ts": f"{env.utc:%Y%m%dT%H%M%SZ}",
    }
    pt1 = {
        "abort_reason": token, "confidence": None if deriver else rng.choice(CONFIDENCES),
        "detail": detail, "hardware_sm": None if no_gpus else env.sm, "is_gate_only": True,
        "point": "gate",
        "predicted_b_breakdown": None if deriver else _breakdown(env), "profile_like": env.profile,
        "raw_verdict": "wont-fit" if token in ("hard-block", "no-fit-model") else (
            None if deriver else rng.choice(("fits-clean", "fits-constrained"))),
        "schema": 2, "slug": m.slug,
    }
    return {"manifest": manifest, "pt1": pt1}


def _kind(i: int, rng: random.Random) -> tuple[str, dict[str, Any]]:
    if i < len(HEAD):
        return HEAD[i][0], dict(HEAD[i][1])
    return _weighted(rng, KIND_WEIGHTS.items()), {}


def plan(n: int, seed: int = 0) -> list[str]:
    """The scenario kind of each of the first ``n`` bundles."""
    return [_kind(i, random.Random(f"loop-bench:{seed}:{i}"))[0] for i in range(n)]


def build(i: int, seed: int = 0) -> tuple[str, str, str, dict[str, Any]]:
    """Bundle ``i`` of the corpus for ``seed``: ``(kind, slug dir, utc_ts, documents)``."""
    rng = random.Random(f"loop-bench:{seed}:{i}")
    kind, options = _kind(i, rng)
    utc = BASE_TIME + timedelta(minutes=23 * i, seconds=rng.randrange(22 * 60))
    if kind == "arch-unsupported":
        env = _env(rng, utc, models=NEW_ARCH_MODELS)
    elif kind == "quant-config":
        env = _env(rng, utc, models=tuple(m for m in MODELS if m.method in ("awq", "gptq")))
    elif kind == "no-kernel-image":
        env = _env(rng, utc, gpu_filter=lambda g: g[2] >= 12.0 or g[2] < 7.0,
                   engine_filter=lambda e: e[2] == "plain")
    elif kind == "fa3-hopper":
        env = _env(rng, utc, gpu_filter=lambda g: 8.0 <= g[2] < 9.0)
    elif kind == "gate" and options.get("token") == "engine-support-unknown/no-arch-row":
        env = _env(rng, utc, models=NEW_ARCH_MODELS)
    else:
        env = _env(rng, utc)
    docs = _gate(env, options) if kind == "gate" else _schema1(env, kind, options)
    return kind, sanitize_slug(env.model.slug), f"{utc:%Y%m%dT%H%M%SZ}", docs


_FILE_NAMES = (("manifest", "manifest.json"), ("pt1", "pt1-gate.json"),
               ("pt2", "pt2-download.json"), ("pt3", "pt3-boot.json"),
               ("pt4", "pt4-smoke.json"), ("pt5", "pt5-override-capture.json"))


def _write_range(root: Path, start: int, stop: int, seed: int) -> list[tuple[str, str]]:
    """Write bundles ``start`` .. ``stop - 1``; their ``(slug dir, utc_ts)`` in order."""
    out = []
    for i in range(start, stop):
        _kind_name, slug_dir, ts, docs = build(i, seed)
        target = root / slug_dir / ts
        target.mkdir(parents=True, exist_ok=True)
        for key, name in _FILE_NAMES:
            doc = docs.get(key)
            if doc is not None:
                with open(target / name, "w", encoding="utf-8") as fh:
                    fh.write(_dump(doc))
        out.append((slug_dir, ts))
    return out


def _write_range_star(args: tuple[Path, int, int, int]) -> list[tuple[str, str]]:
    return _write_range(*args)


def generate(out_dir: str | os.PathLike[str], n: int, seed: int = 0, *, start: int = 0,
             jobs: int = 1) -> list[Path]:
    """Write bundles ``start`` .. ``n - 1`` under ``out_dir``; return their directories in order.

    Bundle ``i`` depends only on ``(seed, i)``, so a corpus can be written in
    pieces (``start``) -- after a prefix copied from a smaller corpus, or to
    resume an interrupted run -- and by ``jobs`` processes at once; the files
    are the same either way. ``.last`` names the newest bundle written so far.
    """
    root = Path(out_dir)
    root.mkdir(parents=True, exist_ok=True)
    if jobs > 1 and n - start > 200 and "fork" in multiprocessing.get_all_start_methods():
        step = max(100, -(-(n - start) // (jobs * 8)))
        tasks = [(root, a, min(n, a + step), seed) for a in range(start, n, step)]
        with multiprocessing.get_context("fork").Pool(jobs) as pool:
            written = [pair for part in pool.imap(_write_range_star, tasks) for pair in part]
    else:
        written = _write_range(root, start, n, seed)
    newest = max((f"{ts}\x00{slug_dir}" for slug_dir, ts in written), default="")
    last = root / ".last"
    if start > 0 and last.is_file():  # a piece written earlier may hold a newer bundle
        slug_dir, _, ts = last.read_text(encoding="utf-8").strip().rpartition("/")
        newest = max(newest, f"{ts}\x00{slug_dir}")
    if newest:
        ts, slug_dir = newest.split("\x00")
        last.write_text(f"{slug_dir}/{ts}\n", encoding="utf-8")
    return [root / slug_dir / ts for slug_dir, ts in written]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="output directory (the .pull-captures/ root)")
    parser.add_argument("n", type=int, help="number of bundles")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=1, help="processes writing bundles (default 1)")
    args = parser.parse_args(argv)
    paths = generate(args.out, args.n, args.seed, jobs=args.jobs)
    kinds: dict[str, int] = {}
    for kind in plan(args.n, args.seed):
        kinds[kind] = kinds.get(kind, 0) + 1
    summary = ", ".join(f"{k} {v}" for k, v in sorted(kinds.items()))
    print(f"wrote {len(paths)} bundles to {args.out} ({summary})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
