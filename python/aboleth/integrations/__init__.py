"""Aboleth inside other frameworks: ``aboleth.integrations.vllm`` (vLLM's expert-parallel
all-to-all backend). Each integration imports its framework when it is imported; this package
imports nothing."""
