"""Tests of the benchmarks' library, studies and harnesses (benchmarks/)."""
