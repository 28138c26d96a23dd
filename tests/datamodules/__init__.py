"""Tests of the data modules (datamodules/)."""
