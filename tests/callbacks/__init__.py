"""Tests of the optional callbacks (callbacks/)."""
