"""Aboleth's tier-1 bindings for other kernel languages (``docs/TIERS.md``): ``triton.tier1``, the
device library's operations callable from a stock Triton 3.6 kernel through their LLVM bitcode.
The CuTe DSL binding is not here yet (its library is not on these machines)."""
