"""Hugging Face model ids of presets that name none in their own module: each id is the Hub repository whose
``config.json`` the preset's source cites (the preset's ``source`` names it; ``llama3.1-70b``-style ids that
share a preset's config are listed where the config is the same file's numbers)."""

from __future__ import annotations

import dataclasses

HF_IDS: dict[str, tuple[str, ...]] = {
    **{
        f"pythia-{s}": (f"EleutherAI/pythia-{s}",) for s in ("70m", "160m", "410m", "1b", "1.4b", "2.8b", "6.9b", "12b")
    },
    # Llama 3.1 8B/70B: the sizes of Llama 3's (Llama 3 Herd of Models, Table 3); only the RoPE scaling and the
    # 128k context of their config.json differ, which no count here reads (the preset's T is 8192: --seq sets it)
    "llama3-8b": ("meta-llama/Llama-3.1-8B",),
    "llama3-70b": ("meta-llama/Llama-3.1-70B",),
    "gpt-neox-20b": ("EleutherAI/gpt-neox-20b",),
    "falcon-7b": ("tiiuae/falcon-7b",),
    "falcon-40b": ("tiiuae/falcon-40b",),
    "falcon-180b": ("tiiuae/falcon-180B",),
    "falcon-rw-1b": ("tiiuae/falcon-rw-1b",),
    "starcoder2-3b": ("bigcode/starcoder2-3b",),
    "starcoder2-7b": ("bigcode/starcoder2-7b",),
    "starcoder2-15b": ("bigcode/starcoder2-15b",),
    "gpt-oss-20b": ("openai/gpt-oss-20b",),
    "gpt-oss-120b": ("openai/gpt-oss-120b",),
    "llama4-scout": ("meta-llama/Llama-4-Scout-17B-16E",),
    "llama4-maverick": ("meta-llama/Llama-4-Maverick-17B-128E",),
    "bert-base-uncased": ("google-bert/bert-base-uncased", "bert-base-uncased"),
    "bert-large-uncased": ("google-bert/bert-large-uncased", "bert-large-uncased"),
    "bert-base-cased": ("google-bert/bert-base-cased", "bert-base-cased"),
    "bert-large-cased": ("google-bert/bert-large-cased", "bert-large-cased"),
    "roberta-base": ("FacebookAI/roberta-base",),
    "roberta-large": ("FacebookAI/roberta-large",),
    **{f"t5-{s}": (f"google-t5/t5-{s}",) for s in ("small", "base", "large", "3b", "11b")},
    **{f"t5-v1.1-{s}": (f"google/t5-v1_1-{s}",) for s in ("small", "base", "large", "xl", "xxl")},
    "vit-base-patch16-224": ("google/vit-base-patch16-224",),
    "vit-large-patch16-224": ("google/vit-large-patch16-224",),
    "vit-base-patch16-224-in21k": ("google/vit-base-patch16-224-in21k",),
    "vit-large-patch16-224-in21k": ("google/vit-large-patch16-224-in21k",),
    "vit-huge-patch14-224-in21k": ("google/vit-huge-patch14-224-in21k",),
    **{f"mamba-{s}": (f"state-spaces/mamba-{s}-hf",) for s in ("130m", "370m", "790m", "1.4b", "2.8b")},
    "jamba-v0.1": ("ai21labs/Jamba-v0.1",),
    "jamba-1.5-large": ("ai21labs/AI21-Jamba-1.5-Large",),
    "gemma-2b": ("google/gemma-2b",),
    "gemma-7b": ("google/gemma-7b",),
    "gemma2-2b": ("google/gemma-2-2b",),
    "gemma2-9b": ("google/gemma-2-9b",),
    "gemma2-27b": ("google/gemma-2-27b",),
    "gemma3-1b": ("google/gemma-3-1b-pt",),
    "gemma3-4b": ("google/gemma-3-4b-pt",),
    "gemma3-12b": ("google/gemma-3-12b-pt",),
    "gemma3-27b": ("google/gemma-3-27b-pt",),
    "phi3-mini-4k": ("microsoft/Phi-3-mini-4k-instruct",),
    "phi3-medium-4k": ("microsoft/Phi-3-medium-4k-instruct",),
    "phi4": ("microsoft/phi-4",),
    **{
        f"qwen3-{s.lower()}": (f"Qwen/Qwen3-{s}",)
        for s in ("0.6B", "1.7B", "4B", "8B", "14B", "32B", "30B-A3B", "235B-A22B")
    },
    "olmo2-7b": ("allenai/OLMo-2-1124-7B",),
    "olmo2-13b": ("allenai/OLMo-2-1124-13B",),
}


def with_ids(families: list) -> list:
    """``families`` with each preset's :data:`HF_IDS` added to its aliases."""
    out = []
    for fam in families:
        presets = tuple(
            dataclasses.replace(p, aliases=(*p.aliases, *(a for a in HF_IDS.get(p.name, ()) if a not in p.aliases)))
            for p in fam.presets
        )
        out.append(dataclasses.replace(fam, presets=presets))
    return out
