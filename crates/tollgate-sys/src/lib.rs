//! tollgate-sys: every `unsafe` block of tollgate lives here, each with a `// SAFETY:` line.
//!
//! The product crate `tollgate` is `#![forbid(unsafe_code)]`; what it needs from the kernel
//! beyond what tokio, socket2 and rustix expose safely is wrapped here behind safe functions.
