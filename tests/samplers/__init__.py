"""Tests of samplers and estimators on plain tensors (samplers/)."""
