"""Architectures built with costmodel's public API (import name ``costmodel_graphs``).

The directory is ``graphs/``; it installs as ``costmodel_graphs`` so that it
cannot collide with other distributions' top-level ``graphs`` package, and the
engine finds it through the ``costmodel.architectures`` entry point, the same
way it finds architectures from any other package.
"""

from __future__ import annotations


def architectures() -> list:
    """Every family this package provides (the entry point's target)."""
    from . import (
        bert,
        deepseek_v3,
        falcon,
        gemma,
        gpt,
        gpt_neox,
        gpt_oss,
        jamba,
        llama,
        llama4,
        mamba,
        mistral,
        mixtral,
        olmo2,
        phi3,
        qwen2,
        qwen3,
        starcoder2,
        t5,
        vit,
    )
    from .hf_ids import with_ids

    return with_ids(
        [
            gpt.FAMILY,
            llama.FAMILY,
            mistral.FAMILY,
            qwen2.FAMILY,
            mixtral.FAMILY,
            deepseek_v3.FAMILY,
            gpt_neox.FAMILY,
            falcon.FAMILY,
            starcoder2.FAMILY,
            gpt_oss.FAMILY,
            llama4.FAMILY,
            bert.FAMILY,
            bert.ROBERTA,
            t5.FAMILY,
            vit.FAMILY,
            mamba.FAMILY,
            jamba.FAMILY,
            gemma.FAMILY,
            gemma.FAMILY2,
            gemma.FAMILY3,
            phi3.FAMILY,
            qwen3.FAMILY,
            qwen3.FAMILY_MOE,
            olmo2.FAMILY,
        ]
    )
