//! Conformance of candle-hip with Candle's CPU backend: one test target
//! (one executable in the staged GPU suite), its tests grouped by topic.

mod common;
mod fused;
