//! Host/device shared layouts, defined once: read by codegen, runtime and simulator alike.
