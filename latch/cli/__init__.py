"""Command-line tools: latch-opt."""
