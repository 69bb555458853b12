"""Triton bindings of Aboleth's tier 1: ``tier1`` (the device library's operations as Triton calls,
linked from their bitcode through ``extern_libs``). Tier 2, the compiled form, is
``aboleth.language`` with ``world.compilation()``."""
