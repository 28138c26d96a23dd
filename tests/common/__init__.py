"""Tests of the shared adapters (common/)."""
