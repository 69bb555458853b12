//! Random valid Aboleth programs for translation validation (being written).
